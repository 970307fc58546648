package org.symmem4j.state;

import java.util.Map;
import java.util.TreeMap;

/**
 * The free ranges of a parameter cache's heap, known only to its owner: first-fit allocation and coalescing
 * release. Held by {@link CacheDirectory}, the owner's side of {@link ParameterCache} (host memory) and
 * {@link DeviceParameterCache} (GPU memory), whose heaps have the same layout
 * ({@link org.symmem4j.parallel.layout.ParameterCacheLayout}).
 */
final class HeapRanges {

    /** Free heap ranges: offset -> bytes. */
    private final TreeMap<Long, Long> free = new TreeMap<>();

    HeapRanges(long heapBytes) {
        free.put(0L, heapBytes);
    }

    /**
     * Takes the first free range of at least {@code bytes}.
     *
     * @param bytes the block's bytes
     * @return its offset in the heap, or -1 when no free range is large enough
     */
    long take(long bytes) {
        for (Map.Entry<Long, Long> f : free.entrySet()) {
            if (f.getValue() >= bytes) {
                long off = f.getKey();
                long size = f.getValue();
                // read before the remove: TreeMap's remove of a node with two children moves its successor's key
                // and value into that node, so f would answer the successor's afterwards
                free.remove(off);
                if (size > bytes) {
                    free.put(off + bytes, size - bytes);
                }
                return off;
            }
        }
        return -1;
    }

    /** {@return the bytes of every free range} */
    long freeBytes() {
        long n = 0;
        for (long b : free.values()) {
            n += b;
        }
        return n;
    }

    /**
     * Gives a block back, coalesced with the free ranges right before and after it.
     *
     * @param block the block's offset
     * @param bytes its bytes
     */
    void give(long block, long bytes) {
        Long afterBytes = free.remove(block + bytes);
        if (afterBytes != null) {
            bytes += afterBytes;
        }
        long start = block;
        Map.Entry<Long, Long> before = free.floorEntry(block);
        if (before != null && before.getKey() + before.getValue() == block) {
            start = before.getKey();
            bytes += before.getValue();
        }
        free.put(start, bytes);
    }
}
