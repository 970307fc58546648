package org.symmem4j.state;

import static org.symmem4j.parallel.layout.ParameterCacheLayout.BLOCK_HEADER_BYTES;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Objects;

import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceMemory;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.layout.ParameterCacheLayout;

/**
 * The GPU form of {@link ParameterCache}: named, versioned entries in the owner's GPU symmetric memory within a byte
 * budget, laid out as {@link ParameterCacheLayout}'s GPU form (the host cache's directory and seqlock, in host memory;
 * the blocks in GPU memory). The owner {@link #put}s an entry from host or device memory; any rank {@link #get}s a
 * zero-copy {@link View} of the owner's current version: its device address, as mapped on the reader's GPU, its
 * length and version, for the reader's kernels to read in place.
 *
 * <pre>{@code
 * try (DeviceParameterCache cache = DeviceParameterCache.create(comm, 256L << 20, 64)) {   // collective
 *     if (comm.group().rank() == 0) cache.putFromDevice("adapter/a", weightsOnGpu);       // owner, synchronous
 *     DeviceParameterCache.View v = cache.get("adapter/a");                               // any rank, zero-copy
 *     launchMyKernel(v.data());  gpu.synchronize();                                        // read in place
 *     if (!v.isValid()) { ... }   // freed while read (two newer versions since): get it again
 * }
 * }</pre>
 *
 * <ul>
 *   <li><b>Where things are</b>: the blocks (the bytes) in each rank's GPU memory, mapped on every peer's GPU; the
 *       directory (names, versions, slot to block, the blocks' generations, last-use ticks) in host memory the ranks
 *       share ({@link Group#hostTransport()}: threads of one JVM, {@code /dev/shm} for processes). So a {@link #get}
 *       is host loads (no device copy, no synchronize), and only reading the bytes touches
 *       the GPU: one kernel or one copy of the block.</li>
 *   <li><b>No torn entry (versioned double buffer, checked after use)</b>: a put copies its data into a fresh block
 *       (never one readers see) and waits for the copy, then publishes the block's generation (odd, never given
 *       before in the part) and the slot in one seqlock write (word odd, fields and generations, word even with
 *       release). The version it replaced stays untouched until the next put of the name, so a reader holding a view
 *       across one replacement still reads the old bytes whole. A view does not pin its block: the reader re-checks
 *       with {@link View#isValid()} after its reads completed (after its stream's synchronize): two host loads, true
 *       while the slot still lists the view's generation; a second put, an eviction or a remove drops it (before the
 *       owner's next copy into the range starts), and the reader gets the entry again.</li>
 *   <li><b>Puts are synchronous</b>: {@link #put} copies host bytes in ({@link DeviceCommunicator#copyFromHost}, which
 *       returns once they are in the block, from pageable memory too); {@link #putFromDevice} copies
 *       device bytes on this rank's stream (after the work enqueued there, e.g. the kernel that produced them) and
 *       waits for the stream; both return once the new version is published. A put whose copy throws gives its block back.</li>
 *   <li><b>Budget, LRU as on the host</b>: each rank's part holds {@code budgetBytes} of blocks (64-byte header,
 *       data 64-byte aligned) and {@code maxEntries} names, with the host cache's policy, written once for both
 *       ({@code CacheDirectory}): a put that does not fit first frees previous versions, then evicts the least
 *       recently used entries (never the one being put); a new name beyond {@code maxEntries} evicts the least
 *       recently used entry. A get counts as a use (a host store of the time into the entry's tick). A version
 *       that cannot fit the budget beside the one it replaces is refused with an {@link IllegalArgumentException}
 *       before anything is written; a heap too fragmented to take a block after every other entry was freed with an
 *       {@link IllegalStateException}.</li>
 *   <li><b>Readers of an evicted entry</b>: as on the host, a view pins nothing; its memory stays mapped (part of the
 *       cache's symmetric allocation, freed only by {@link #close}), so a kernel reading a stale view never reads
 *       freed memory, only bytes that may belong to a newer entry, which the check after use reports.</li>
 * </ul>
 *
 * One thread per rank uses an instance. Created on a GPU {@link Communicator} whose ranks map each other's memory
 * (CUDA on one machine, ranks as threads or processes); refused elsewhere (on a host group use
 * {@link ParameterCache}).
 */
public final class DeviceParameterCache implements AutoCloseable {

    /**
     * One version of an entry, as a zero-copy view of its owner's GPU memory: name, owner, version, the bytes (the
     * owner's memory as mapped on this rank's GPU, address and length) and {@link #isValid()}, the check after use.
     */
    public static final class View extends CachedVersion {
        private View(String name, SharedDirectory.Found f, MemorySegment data, SharedDirectory directory) {
            super("DeviceParameterCache.View", name, f.owner(), f.version(), data, directory::holds, f.slot(),
                    f.generation());
        }

        /** {@return the device address of the bytes on this rank's GPU} */
        public long deviceAddress() {
            return data().address();
        }
    }

    private final Group group;
    private final SymmetricMemory memory;
    private final DeviceCommunicator gpu;
    /** Every rank's heap as mapped on this rank's GPU. */
    private final long[] parts;
    /** Every rank's directory, in host memory the ranks share. */
    private final SharedDirectory directory;

    private DeviceParameterCache(Group group, SymmetricMemory memory, DeviceCommunicator gpu, DeviceMemory device,
                                 SharedDirectory directory) {
        this.group = group;
        this.memory = memory;
        this.gpu = gpu;
        this.parts = new long[group.worldSize()];
        for (int r = 0; r < parts.length; r++) {
            parts[r] = device.bufferPointer(r);
        }
        this.directory = directory;
    }

    /**
     * Collective: a cache in which every rank may own up to {@code maxEntries} entries of {@code budgetBytes} in all,
     * in its GPU memory.
     *
     * @param comm        this rank's communicator, of a GPU transport whose ranks map each other's memory
     * @param budgetBytes bytes of entry data (with a 64-byte header per block) each rank's part holds, at least 128
     * @param maxEntries  names each rank's part holds, at least 1
     * @return this rank's view; close it collectively
     * @throws IllegalArgumentException for a bad budget or entry count, or ranks that disagree on them (on every
     *         rank, before anything is allocated)
     * @throws UnsupportedOperationException on a host communicator, or where peers' GPU memory is not mapped here
     */
    public static DeviceParameterCache create(Communicator comm, long budgetBytes, int maxEntries) {
        Objects.requireNonNull(comm, "comm");
        Group group = comm.group();
        ParameterCache.checkArguments(budgetBytes, maxEntries);
        DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow(() ->
                new UnsupportedOperationException("device parameter cache on communicator=" + comm + ": not a GPU"
                        + " communicator (fix: ParameterCache.create with the group, for a cache in host memory)"));
        SharedMemories.agree(group, "device parameter cache", "device-cache-create", "budgetBytes=" + budgetBytes
                + " maxEntries=" + maxEntries, "create the cache on every rank with the same budget and entries");
        long heapBytes = ParameterCacheLayout.align64(budgetBytes);
        // Not SharedMemories.createOnDevice (DeviceHashMap, DeviceRingBuffer): what the ranks share is the directory
        // in host memory, not a formatted device header. The device heap is never zeroed nor formatted (a block's
        // bytes are written by its put before the directory lists it; zeroing the whole budget would only cost), so
        // there is no device barrier; the directory's create meets the group at its own barrier and only then
        // verifies every rank's header, since it reads the peers' (a device structure verifies its own header read
        // back, before its barrier). The refusal names GPU memory, not a kernel capability.
        SymmetricMemory memory = SharedMemories.allocateMapped(group, heapBytes, "device parameter cache");
        try {
            DeviceMemory device = memory.unwrap(DeviceMemory.class).orElseThrow(() ->
                    new UnsupportedOperationException("device parameter cache on transport="
                            + group.transport().capabilities(group).transport() + ": its symmetric memory is not GPU"
                            + " memory (fix: ParameterCache.create on a host group, or a CUDA group)"));
            SharedDirectory directory = SharedDirectory.create(group, "device parameter cache", maxEntries, heapBytes);
            return new DeviceParameterCache(group, memory, gpu, device, directory);
        } catch (RuntimeException e) {
            memory.close();
            throw e;
        }
    }

    // ------------------------------------------------------------------------------------------ owner side

    /**
     * Puts a new version of {@code name} into this rank's part from host memory; synchronous: returns once the
     * version is published. Frees previous versions and evicts least recently used entries as needed.
     *
     * @param name the entry's name, 1..68 UTF-8 bytes
     * @param data host bytes
     * @return the new version
     * @throws IllegalArgumentException for a bad name, or data that cannot fit the budget beside the version it
     *         replaces
     * @throws IllegalStateException when no contiguous range is left after every other entry was freed (fragmented)
     */
    public long put(String name, MemorySegment data) {
        return put(name, data, 0, false);
    }

    /**
     * As {@link #put(String, MemorySegment)}, with the version given by the caller (a layer that orders versions
     * across ranks, as the GPU session cache's stamps): above every version this rank put before.
     *
     * @param name    the entry's name, 1..68 UTF-8 bytes
     * @param data    host bytes
     * @param version the version, above this rank's last
     * @return {@code version}
     * @throws IllegalArgumentException for a bad name, a version not above this rank's last, or data that cannot fit
     *         the budget beside the version it replaces (before anything is written)
     * @throws IllegalStateException when no contiguous range is left after every other entry was freed (fragmented)
     */
    public long put(String name, MemorySegment data, long version) {
        return put(name, data, checkVersion(version), false);
    }

    /**
     * Puts a new version of {@code name} into this rank's part from this rank's device memory: the copy runs on this
     * rank's stream, after the work enqueued there before (the kernel that produced the bytes), and the call waits
     * for the stream; synchronous: returns once the version is published.
     *
     * @param name the entry's name, 1..68 UTF-8 bytes
     * @param data device memory of this rank (address and length)
     * @return the new version
     * @throws IllegalArgumentException for a bad name, or data that cannot fit the budget beside the version it
     *         replaces
     * @throws IllegalStateException when no contiguous range is left after every other entry was freed (fragmented)
     */
    public long putFromDevice(String name, MemorySegment data) {
        return put(name, data, 0, true);
    }

    /**
     * As {@link #putFromDevice(String, MemorySegment)}, with the version given by the caller, as
     * {@link #put(String, MemorySegment, long)}.
     *
     * @param name    the entry's name, 1..68 UTF-8 bytes
     * @param data    device memory of this rank (address and length)
     * @param version the version, above this rank's last
     * @return {@code version}
     * @throws IllegalArgumentException for a bad name, a version not above this rank's last, or data that cannot fit
     *         the budget beside the version it replaces (before anything is written)
     * @throws IllegalStateException when no contiguous range is left after every other entry was freed (fragmented)
     */
    public long putFromDevice(String name, MemorySegment data, long version) {
        return put(name, data, checkVersion(version), true);
    }

    private static long checkVersion(long version) {
        if (version < 1) {
            throw new IllegalArgumentException("device parameter cache put: version=" + version + " expected >= 1"
                    + " (fix: pass a positive version above this rank's last, or call the put without one)");
        }
        return version;
    }

    private long put(String name, MemorySegment data, long version, boolean onDevice) {
        Objects.requireNonNull(data, "data");
        byte[] nameBytes = ParameterCacheLayout.nameBytes(name); // a bad name is refused before anything is written
        return directory.put(name, nameBytes, data.byteSize(), version, block -> {
            if (data.byteSize() > 0) {
                MemorySegment dst = MemorySegment.ofAddress(parts[group.rank()] + block + BLOCK_HEADER_BYTES)
                        .reinterpret(data.byteSize());
                if (onDevice) {
                    gpu.copyAsync(dst, data);
                    gpu.synchronize(); // the data is in the block before the directory lists it
                } else {
                    // returns once the bytes are in the block, from pageable host memory too (the CUDA runtime
                    // waits for the staged DMA), so before the directory (a host store) lists it
                    gpu.copyFromHost(dst, data);
                }
            }
        });
    }

    /**
     * Removes {@code name} from this rank's part; readers holding a view of it see {@link View#isValid()} false.
     *
     * @param name the entry's name
     * @return true when it was there
     */
    public boolean remove(String name) {
        return directory.remove(name);
    }

    // ------------------------------------------------------------------------------------------ reader side

    /**
     * The current version of {@code name}, looked up in this rank's part first, then in the other ranks' in rank
     * order.
     *
     * @param name the entry's name
     * @return a view of it, or null when no rank has it
     */
    public View get(String name) {
        byte[] nameBytes = ParameterCacheLayout.nameBytes(name);
        long h = ParameterCache.hash(nameBytes);
        for (int i = 0; i < parts.length; i++) {
            int owner = (group.rank() + i) % parts.length;
            View v = lookup(owner, name, nameBytes, h);
            if (v != null) {
                return v;
            }
        }
        return null;
    }

    /**
     * The current version of {@code name} in rank {@code owner}'s part: host loads only.
     *
     * @param owner the owner rank
     * @param name  the entry's name
     * @return a view of it, or null when that rank does not have it
     */
    public View get(int owner, String name) {
        Objects.checkIndex(owner, parts.length);
        byte[] nameBytes = ParameterCacheLayout.nameBytes(name);
        return lookup(owner, name, nameBytes, ParameterCache.hash(nameBytes));
    }

    /**
     * The current version of {@code name} in rank {@code owner}'s part, read without making a view (host loads
     * only): what a reader waiting for a hot swap polls, calling {@link #get(int, String)} once the version changed.
     * Allocates nothing when called with the same name as the previous call; does not count as a use for the owner's
     * LRU order.
     *
     * @param owner the owner rank
     * @param name  the entry's name
     * @return the version a get would return now, or -1 when that rank has no version of the name
     */
    public long version(int owner, String name) {
        Objects.checkIndex(owner, parts.length);
        return directory.version(owner, name);
    }

    private View lookup(int owner, String name, byte[] nameBytes, long h) {
        SharedDirectory.Found f = directory.lookup(owner, name, nameBytes, h);
        if (f == null) {
            return null;
        }
        MemorySegment data = MemorySegment.ofAddress(parts[owner] + f.block() + BLOCK_HEADER_BYTES)
                .reinterpret(f.length());
        return new View(name, f, data, directory);
    }

    /**
     * The names this rank's part evicted by its budget or entry limit (least recently used first, never a
     * {@link #remove}) since the last call, in eviction order; owner side, for layers that tell an evicted entry from
     * one that never existed (the GPU session cache).
     *
     * @return the evicted names, possibly empty; the list is this rank's to keep
     */
    public List<String> takeEvicted() {
        return directory.takeEvicted();
    }

    /** {@return entries this rank owns now} */
    public int ownEntries() {
        return directory.size();
    }

    /** {@return heap bytes of this rank's part in free ranges (a failed put gives its block back)} */
    public long freeBytes() {
        return directory.freeBytes();
    }

    /** Collective: frees the cache's memory once every rank has stopped using it; views become unusable. */
    @Override
    public void close() {
        try {
            memory.close();
        } finally {
            directory.close();
        }
    }
}
