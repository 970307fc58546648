package org.symmem4j.state;

import static org.symmem4j.parallel.layout.ParameterCacheLayout.BLOCK_HEADER_BYTES;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_CURRENT;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_CURRENT_LENGTH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_HASH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_NAME;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_NAME_LENGTH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_PREVIOUS;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_PREVIOUS_LENGTH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_VERSION;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.HashMap;
import java.util.Map;

import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.layout.ParameterCacheLayout;

/**
 * The owner's side of one rank's part of a parameter cache, known only to the owner: its names and their slots, the
 * free ranges of its heap, the slot changes a put and a remove make, and the budget policy, written once for
 * {@link ParameterCache} (host memory) and {@link DeviceParameterCache} (GPU memory), whose parts have the same layout
 * ({@link ParameterCacheLayout}).
 *
 * <p>The policy: a put whose block does not fit beside the version it replaces is refused before anything is written;
 * a new name beyond {@code maxEntries} first evicts the least recently used entry; a block that does not fit first
 * frees previous versions (of any name), then evicts least recently used entries (never the one being put), and when
 * no contiguous range is left after that (the heap is fragmented) the put is refused. An entry's last use is the
 * latest of its owner's last put and any rank's last get (the part's last-use ticks).
 *
 * <p>The directory is read here with plain loads: in host memory it is the owner's own part (only the owner writes
 * it), on a GPU the owner's host copy of it. Every change goes through the {@link Part}'s seqlock, which writes it
 * where readers read it.
 */
final class CacheDirectory {

    /** Where the owner's directory lives, and how a change becomes visible to readers there. */
    interface Part {
        /**
         * The slot at {@code slot} starts changing: its word turns odd where readers read it, before any field.
         *
         * @param slot the slot's offset
         * @return the odd word
         */
        long beginWrite(long slot);

        /**
         * The change ends: the slot's fields, then its even word, where readers read them.
         *
         * @param slot the slot's offset
         * @param odd  what {@link #beginWrite} returned
         */
        void endWrite(long slot, long odd);

        /**
         * Turns the block's generation even where readers read it (views of it then read invalid), before its range
         * can be written again.
         *
         * @param block the block's heap offset
         */
        void retire(long block);

        /**
         * Records a use of slot {@code i} now (the owner's put).
         *
         * @param i the slot
         */
        void touch(int i);

        /** {@return every slot's last-use tick, read now} */
        long[] lastUses();

        /**
         * The entry {@code name} was evicted by the budget policy (never called for a remove).
         *
         * @param name the evicted entry's name
         */
        default void evicted(String name) {
        }
    }

    private final String structure;
    private final int rank;
    private final int slots;
    private final long heapBytes;
    /** The owner's directory: slot fields at {@link ParameterCacheLayout#slotOffset}, read with plain loads. */
    private final MemorySegment directory;
    private final Part part;
    private final Map<String, Integer> slotOf = new HashMap<>();
    private final HeapRanges free;
    /** XORed into every generation (bit 0 clear, so parity is kept): a freed block's word is not a small number. */
    private final long generationSalt = new java.util.SplittableRandom().nextLong() & ~1L;
    private long generations;

    CacheDirectory(String structure, int rank, int slots, long heapBytes, MemorySegment directory, Part part) {
        this.structure = structure;
        this.rank = rank;
        this.slots = slots;
        this.heapBytes = heapBytes;
        this.directory = directory;
        this.part = part;
        this.free = new HeapRanges(heapBytes);
    }

    /**
     * The generation a put publishes its fresh block with: odd, and never given before in this part, so that a view of
     * an older block at the same offset, or of a block whose header word a later block's data has overwritten since,
     * cannot read it as its own (salted: data bytes equal it only by a 2^-63 coincidence, where a small counter would
     * equal a small integer of the data). Freeing the block adds 1 (even).
     *
     * @return the generation, odd
     */
    long nextGeneration() {
        return generationSalt ^ (2 * ++generations + 1);
    }

    /** {@return names this rank owns now} */
    int size() {
        return slotOf.size();
    }

    /** {@return heap bytes in free ranges} */
    long freeBytes() {
        return free.freeBytes();
    }

    /**
     * Finds or makes room for a new version of {@code name} of {@code dataBytes}: refuses one that cannot fit beside
     * the version it replaces (before anything is written), claims a slot for a new name (evicting the least recently
     * used entry when the names are used up), then takes a block (freeing previous versions, then evicting least
     * recently used entries).
     *
     * @param name      the entry's name, checked
     * @param nameBytes its UTF-8 bytes
     * @param dataBytes the new version's bytes
     * @return the slot and the block the put writes
     * @throws IllegalArgumentException for a version that cannot fit the budget beside the one it replaces
     * @throws IllegalStateException when no contiguous range is left after freeing every other entry
     */
    Room makeRoom(String name, byte[] nameBytes, long dataBytes) {
        long need = ParameterCache.blockBytes(dataBytes);
        Integer existing = slotOf.get(name);
        long currentBytes = existing == null ? 0
                : ParameterCache.blockBytes(field(existing, SLOT_CURRENT_LENGTH));
        if (need + currentBytes > heapBytes) {
            throw new IllegalArgumentException(structure + " entry '" + name + "' of bytes=" + dataBytes
                    + " does not fit budgetBytes=" + heapBytes + " beside the version it replaces (bytes="
                    + Math.max(0, currentBytes - BLOCK_HEADER_BYTES) + "; a hot swap keeps both; fix: create the cache"
                    + " with a budget of at least " + (need + currentBytes) + " bytes)");
        }
        int slot = existing == null ? claimSlot(name, nameBytes) : existing;
        try {
            return new Room(name, slot, allocate(need, slot), need, existing == null);
        } catch (RuntimeException e) {
            if (existing == null) {
                remove(name); // a name claimed for this put only: no slot left behind for a refused put
            }
            throw e;
        }
    }

    /**
     * Where a put writes: its slot and its fresh block.
     *
     * @param name    the entry's name
     * @param slot    its slot
     * @param block   the fresh block's heap offset
     * @param bytes   the block's bytes (header and aligned data)
     * @param claimed whether the slot was claimed for this put (the name had no slot before)
     */
    record Room(String name, int slot, long block, long bytes, boolean claimed) {
    }

    /**
     * Gives back what {@link #makeRoom} took for a put that failed before {@link #publish} (its data copy threw): the
     * block's range, which no reader was ever shown (its generation never turned odd), and the name's slot when it was
     * claimed for this put. Entries evicted to make the room stay evicted.
     *
     * @param room what makeRoom returned
     */
    void abandon(Room room) {
        free.give(room.block(), room.bytes());
        if (room.claimed()) {
            remove(room.name());
        }
    }

    /**
     * Publishes {@code block} as {@code name}'s current version (the linearization point of the swap: the slot's
     * seqlock); the old current becomes the previous, the older previous is freed; the put counts as a use.
     *
     * @param slot    the entry's slot
     * @param block   the block, its data and header written and its generation odd
     * @param length  its data bytes
     * @param version the new version
     */
    void publish(int slot, long block, long length, long version) {
        long s = ParameterCacheLayout.slotOffset(slot);
        long oldPrevious = directory.get(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS);
        long oldPreviousLength = directory.get(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS_LENGTH);
        long odd = part.beginWrite(s);
        directory.set(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS, directory.get(ValueLayout.JAVA_LONG, s + SLOT_CURRENT));
        directory.set(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS_LENGTH,
                directory.get(ValueLayout.JAVA_LONG, s + SLOT_CURRENT_LENGTH));
        directory.set(ValueLayout.JAVA_LONG, s + SLOT_CURRENT, block);
        directory.set(ValueLayout.JAVA_LONG, s + SLOT_CURRENT_LENGTH, length);
        directory.set(ValueLayout.JAVA_LONG, s + SLOT_VERSION, version);
        part.endWrite(s, odd); // the linearization point of the swap
        if (oldPrevious >= 0) {
            release(oldPrevious, oldPreviousLength);
        }
        part.touch(slot);
    }

    /**
     * Removes {@code name}: its slot turns into a tombstone and both its versions are freed (views of them read
     * invalid).
     *
     * @param name the entry's name
     * @return true when it was there
     */
    boolean remove(String name) {
        Integer slot = slotOf.remove(name);
        if (slot == null) {
            return false;
        }
        evictSlot(slot);
        return true;
    }

    private long field(int slot, int field) {
        return directory.get(ValueLayout.JAVA_LONG, ParameterCacheLayout.slotOffset(slot) + field);
    }

    private int claimSlot(String name, byte[] nameBytes) {
        if (slotOf.size() == slots) {
            evictLeastRecentlyUsed(-1);
        }
        long h = ParameterCache.hash(nameBytes);
        for (int i = 0; i < slots; i++) {
            int slot = (int) Long.remainderUnsigned(h + i, slots);
            long s = ParameterCacheLayout.slotOffset(slot);
            long hs = directory.get(ValueLayout.JAVA_LONG, s + SLOT_HASH);
            if (hs == 0 || hs == ParameterCache.TOMBSTONE) {
                // the name, with no version yet: readers find it and answer absent until the put publishes one
                long odd = part.beginWrite(s);
                directory.set(ValueLayout.JAVA_LONG, s + SLOT_HASH, h);
                directory.set(ValueLayout.JAVA_INT, s + SLOT_NAME_LENGTH, nameBytes.length);
                MemorySegment.copy(MemorySegment.ofArray(nameBytes), 0, directory, s + SLOT_NAME, nameBytes.length);
                directory.set(ValueLayout.JAVA_LONG, s + SLOT_CURRENT, -1);
                directory.set(ValueLayout.JAVA_LONG, s + SLOT_CURRENT_LENGTH, 0);
                directory.set(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS, -1);
                part.endWrite(s, odd);
                slotOf.put(name, slot);
                return slot;
            }
        }
        throw Invariants.violated(structure + ": no free slot among maxEntries=" + slots + " after eviction (entries="
                + slotOf.size() + ")");
    }

    /** A heap range of {@code bytes}, freeing previous versions and then LRU entries (never {@code keepSlot}). */
    private long allocate(long bytes, int keepSlot) {
        while (true) {
            long off = free.take(bytes);
            if (off >= 0) {
                return off;
            }
            if (!freeOnePrevious() && !evictLeastRecentlyUsed(keepSlot)) {
                throw new IllegalStateException(structure + ": no contiguous range of bytes=" + bytes + " in budgetBytes="
                        + heapBytes + " on rank=" + rank + " after freeing every other entry (the heap is fragmented;"
                        + " fix: raise the budget)");
            }
        }
    }

    private boolean freeOnePrevious() {
        for (int slot : slotOf.values()) {
            long s = ParameterCacheLayout.slotOffset(slot);
            long previous = directory.get(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS);
            if (previous >= 0) {
                long length = directory.get(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS_LENGTH);
                long odd = part.beginWrite(s);
                directory.set(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS, -1);
                part.endWrite(s, odd);
                release(previous, length);
                return true;
            }
        }
        return false;
    }

    private boolean evictLeastRecentlyUsed(int keepSlot) {
        long[] lastUse = part.lastUses();
        String victim = null;
        long oldest = Long.MAX_VALUE;
        for (Map.Entry<String, Integer> e : slotOf.entrySet()) {
            if (e.getValue() == keepSlot) {
                continue;
            }
            long t = lastUse[e.getValue()];
            if (t < oldest || victim == null) {
                oldest = t;
                victim = e.getKey();
            }
        }
        if (victim == null) {
            return false;
        }
        evictSlot(slotOf.remove(victim));
        part.evicted(victim);
        return true;
    }

    private void evictSlot(int slot) {
        long s = ParameterCacheLayout.slotOffset(slot);
        long current = directory.get(ValueLayout.JAVA_LONG, s + SLOT_CURRENT);
        long currentLength = directory.get(ValueLayout.JAVA_LONG, s + SLOT_CURRENT_LENGTH);
        long previous = directory.get(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS);
        long previousLength = directory.get(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS_LENGTH);
        long odd = part.beginWrite(s);
        directory.set(ValueLayout.JAVA_LONG, s + SLOT_HASH, ParameterCache.TOMBSTONE);
        directory.set(ValueLayout.JAVA_LONG, s + SLOT_CURRENT, -1);
        directory.set(ValueLayout.JAVA_LONG, s + SLOT_PREVIOUS, -1);
        part.endWrite(s, odd);
        if (current >= 0) {
            release(current, currentLength);
        }
        if (previous >= 0) {
            release(previous, previousLength);
        }
    }

    /** Frees a block: its generation turns even first, so views of it read invalid, then the range is reusable. */
    private void release(long block, long length) {
        part.retire(block);
        free.give(block, ParameterCache.blockBytes(length));
    }
}
