package org.symmem4j.state;

import static org.symmem4j.parallel.layout.ParameterCacheLayout.BLOCK_GENERATION;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.BLOCK_HEADER_BYTES;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.BLOCK_LENGTH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.BLOCK_VERSION;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.LINE_BYTES;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_CURRENT;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_CURRENT_LENGTH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_HASH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_NAME;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_NAME_LENGTH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_VERSION;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_WORD;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.DeviceMemory;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.layout.ParameterCacheLayout;
import org.symmem4j.parallel.sync.WaitSubject;
import org.symmem4j.parallel.sync.Waiter;

/**
 * The GPU form of {@link ParameterCache}: named, versioned entries in the owner's GPU symmetric memory within a byte
 * budget, laid out as the host cache's parts ({@link ParameterCacheLayout}: the same directory, seqlock words and
 * blocks). The owner {@link #put}s an entry from host or device memory; any rank {@link #get}s a zero-copy
 * {@link View} of the owner's current version: its device address, as mapped on the reader's GPU, its length and
 * version, for the reader's kernels to read in place.
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
 *   <li><b>No torn entry (versioned double buffer, checked after use)</b>: a put writes its data into a fresh block
 *       (never the one readers see), then the block's version and length, then its generation (odd: published),
 *       then the slot under its seqlock (word odd, fields, word even). The version it replaced stays untouched until
 *       the next put of the name, so a reader holding a view across one replacement still reads the old bytes whole.
 *       A view does not pin its block: the reader re-checks with {@link View#isValid()} after its reads completed
 *       (after its stream's synchronize); true means what it read was that version, whole; false means a second put,
 *       an eviction or a remove freed it, and the reader gets the entry again.</li>
 *   <li><b>How the bytes move</b>: with no kernel: every write of the owner and every read of a directory slot or
 *       block header is a synchronous copy (host to device, device to host, or device to device on the owner's
 *       stream followed by its synchronize), performed in the order issued; a reader's copies read the owner's
 *       memory as mapped on its own GPU. The ordering of the seqlock and of the generation rests on that order: a
 *       copy is complete before the next one of the same rank starts.</li>
 *   <li><b>Puts are synchronous</b>: {@link #put} copies host bytes in; {@link #putFromDevice} copies device bytes
 *       on this rank's stream (after the work enqueued there, e.g. the kernel that produced them) and waits for the
 *       stream; both return once the new version is published.</li>
 *   <li><b>Budget, LRU as on the host</b>: each rank's part holds {@code budgetBytes} of blocks (64-byte header,
 *       data 64-byte aligned) and {@code maxEntries} names, with the host cache's policy, written once for both
 *       ({@code CacheDirectory}): a put that does not fit first frees previous versions, then evicts the least
 *       recently used entries (never the one being put); a new name beyond {@code maxEntries} evicts the least
 *       recently used entry. A get counts as a use: the reader copies the time into the entry's last-use tick in the
 *       owner's memory (one 8-byte copy more per get), the owner reads all ticks (one copy) when it evicts. A version
 *       that cannot fit the budget beside the one it replaces is refused with an {@link IllegalArgumentException}
 *       before anything is written; a heap too fragmented to take a block after every other entry was freed with an
 *       {@link IllegalStateException}.</li>
 *   <li><b>Readers of an evicted entry</b>: as on the host, a view pins nothing. An eviction turns the block's
 *       generation even before its range is reused, so {@link View#isValid()} answers false from then on; the
 *       memory stays mapped (it is part of the cache's symmetric allocation, freed only by {@link #close}), so a
 *       kernel reading a stale view never reads freed memory, only bytes that may belong to a newer entry, which
 *       the check after use reports.</li>
 * </ul>
 *
 * One thread per rank uses an instance. Created on a GPU {@link Communicator} whose ranks map each other's memory
 * (CUDA on one machine); refused elsewhere (on a host group use {@link ParameterCache}).
 */
public final class DeviceParameterCache implements AutoCloseable {

    /**
     * One version of an entry, as a zero-copy view of its owner's GPU memory: name, owner, version, the bytes (the
     * owner's memory as mapped on this rank's GPU, address and length) and {@link #isValid()}, the check after use.
     */
    public static final class View extends CachedVersion {
        private View(String name, int owner, long version, MemorySegment data, DeviceParameterCache cache, long block,
                     long generation) {
            super("DeviceParameterCache.View", name, owner, version, data, cache::generation, block, generation);
        }

        /** {@return the device address of the bytes on this rank's GPU} */
        public long deviceAddress() {
            return data().address();
        }
    }

    private final Group group;
    private final SymmetricMemory memory;
    private final DeviceCommunicator gpu;
    private final int slots;
    private final long heap;
    /** Every rank's buffer as mapped on this rank's GPU. */
    private final long[] parts;
    private final Waiter waiter;
    private final Arena arena = Arena.ofShared();
    /** Staging for the reader's copies: one slot, one block header, one word. */
    private final MemorySegment slotCopy;
    private final MemorySegment header;
    private final MemorySegment word;

    /** Staging for the owner's read of its part's last-use ticks (LRU). */
    private final MemorySegment ticks;

    // ---- owner side: this rank's part, known only here ----
    /** The host copy of this rank's header and directory; every change is copied into GPU memory. */
    private final MemorySegment hostDirectory;
    private final CacheDirectory directory;
    /** The generation of every live block, by heap offset (this rank's GPU memory is not read back for it). */
    private final Map<Long, Long> generations = new HashMap<>();
    /** Names this rank's part evicted by the budget policy since the last {@link #takeEvicted()}. */
    private final List<String> evicted = new ArrayList<>();
    private long nextVersion = 1;

    private DeviceParameterCache(Group group, SymmetricMemory memory, DeviceCommunicator gpu, DeviceMemory device,
                                 int slots, long heapBytes, MemorySegment directory) {
        this.group = group;
        this.memory = memory;
        this.gpu = gpu;
        this.slots = slots;
        this.heap = ParameterCacheLayout.heapOffset(slots);
        this.parts = new long[group.worldSize()];
        for (int r = 0; r < parts.length; r++) {
            parts[r] = device.bufferPointer(r);
        }
        this.waiter = SharedMemories.waiter(group);
        this.slotCopy = arena.allocate(LINE_BYTES, Long.BYTES);
        this.header = arena.allocate(BLOCK_HEADER_BYTES, Long.BYTES);
        this.word = arena.allocate(Long.BYTES, Long.BYTES);
        this.ticks = arena.allocate(8L * slots, Long.BYTES);
        this.hostDirectory = arena.allocate(directory.byteSize(), Long.BYTES);
        this.hostDirectory.copyFrom(directory);
        this.directory = new CacheDirectory("device parameter cache", group.rank(), slots, heapBytes, hostDirectory,
                new DevicePart());
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
        SymmetricMemory memory = SharedMemories.allocateMapped(group,
                ParameterCacheLayout.totalBytes(maxEntries, heapBytes), "device parameter cache");
        try {
            DeviceMemory device = memory.unwrap(DeviceMemory.class).orElseThrow(() ->
                    new UnsupportedOperationException("device parameter cache on transport="
                            + group.transport().capabilities(group).transport() + ": its symmetric memory is not GPU"
                            + " memory (fix: ParameterCache.create on a host group, or a CUDA group)"));
            SharedMemories.zeroOnDevice(memory); // every block's generation 0: never published
            MemorySegment directory;
            try (Arena a = Arena.ofConfined()) {
                directory = a.allocate(ParameterCacheLayout.heapOffset(maxEntries), Long.BYTES);
                ParameterCacheLayout.format(directory, maxEntries, heapBytes, group.rank());
                memory.copyFromHost(directory, 0);
                memory.barrier(); // every part's header and directory copied in, before any rank reads a peer's
                DeviceParameterCache cache = new DeviceParameterCache(group, memory, gpu, device, maxEntries,
                        heapBytes, directory);
                MemorySegment back = a.allocate(LINE_BYTES, Long.BYTES);
                for (int r = 0; r < group.worldSize(); r++) {
                    cache.read(r, 0, back);
                    ParameterCacheLayout.verify(back, maxEntries, heapBytes, r);
                }
                return cache;
            }
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
        return put(name, data, false);
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
        return put(name, data, true);
    }

    private long put(String name, MemorySegment data, boolean onDevice) {
        Objects.requireNonNull(data, "data");
        byte[] nameBytes = ParameterCacheLayout.nameBytes(name); // a bad name is refused before anything is written
        CacheDirectory.Room room = directory.makeRoom(name, nameBytes, data.byteSize());
        long block = room.block();
        long version = nextVersion++;
        long dataAt = parts[group.rank()] + heap + block + BLOCK_HEADER_BYTES;
        if (data.byteSize() > 0) {
            MemorySegment dst = MemorySegment.ofAddress(dataAt).reinterpret(data.byteSize());
            if (onDevice) {
                gpu.copyAsync(dst, data);
                gpu.synchronize(); // the data is in the block before its header says so
            } else {
                gpu.copyFromHost(dst, data);
            }
        }
        header.set(ValueLayout.JAVA_LONG, BLOCK_VERSION, version);
        header.set(ValueLayout.JAVA_LONG, BLOCK_LENGTH, data.byteSize());
        write(header.asSlice(BLOCK_VERSION, 16), heap + block + BLOCK_VERSION);
        long gen = directory.nextGeneration(); // odd: published
        generations.put(block, gen);
        // release (copy order): the data and header copies above completed before this one starts; a reader that
        // reads this odd generation after reading the slot reads the data it publishes
        writeWord(gen, heap + block + BLOCK_GENERATION);
        directory.publish(room.slot(), block, data.byteSize(), version);
        return version;
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

    /**
     * This rank's part in GPU memory: every change of the host copy of the directory is written there by synchronous
     * copies, in the seqlock's order; a copy completes before the next one starts.
     */
    private final class DevicePart implements CacheDirectory.Part {
        /** The slot's word turns odd in GPU memory before any field changes there. */
        @Override
        public long beginWrite(long slot) {
            long odd = ParameterCacheLayout.beginWrite(hostDirectory, slot);
            writeWord(odd, slot + SLOT_WORD);
            return odd;
        }

        /** The slot's fields, then its even word: two copies, in that order. */
        @Override
        public void endWrite(long slot, long odd) {
            write(hostDirectory.asSlice(slot + Long.BYTES, LINE_BYTES - Long.BYTES), slot + Long.BYTES);
            ParameterCacheLayout.endWrite(hostDirectory, slot, odd);
            // release (copy order): the fields' copy completed before the even word's copy starts; pairs with the
            // reader's first word copy in lookup
            writeWord(odd + 1, slot + SLOT_WORD);
        }

        /** The block's generation turns even in GPU memory, complete before any later copy reuses the range. */
        @Override
        public void retire(long block) {
            long gen = generations.remove(block) + 1; // even: freed
            // release (copy order): this copy completes before the next put's data copy into the range starts;
            // pairs with the reader's generation copy after its reads (View.isValid)
            writeWord(gen, heap + block + BLOCK_GENERATION);
        }

        @Override
        public void touch(int i) {
            writeWord(System.nanoTime(), ParameterCacheLayout.lastUseOffset(slots, i)); // no ordering: a hint
        }

        @Override
        public void evicted(String name) {
            evicted.add(name);
        }

        /** Every slot's tick, one copy (readers' ticks may race it: a tick is a hint, never published data). */
        @Override
        public long[] lastUses() {
            read(group.rank(), ParameterCacheLayout.lastUseOffset(slots, 0), ticks);
            return ticks.toArray(ValueLayout.JAVA_LONG);
        }
    }

    private void writeWord(long value, long offset) {
        word.set(ValueLayout.JAVA_LONG, 0, value);
        write(word, offset);
    }

    private void write(MemorySegment src, long offset) {
        gpu.copyFromHost(MemorySegment.ofAddress(parts[group.rank()] + offset).reinterpret(src.byteSize()), src);
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
     * The current version of {@code name} in rank {@code owner}'s part.
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

    private View lookup(int owner, String name, byte[] nameBytes, long h) {
        for (int i = 0; i < slots; i++) {
            int slot = (int) Long.remainderUnsigned(h + i, slots);
            long s = ParameterCacheLayout.slotOffset(slot);
            while (true) {
                // acquire (copy order): pairs with the owner's even-word copy, which follows its fields' copy
                long w = readWord(owner, s + SLOT_WORD);
                if ((w & 1) != 0) {
                    awaitStable(owner, s, w);
                    continue;
                }
                read(owner, s, slotCopy);
                if (readWord(owner, s + SLOT_WORD) != w) {
                    continue; // the owner changed the slot while it was read
                }
                long hs = slotCopy.get(ValueLayout.JAVA_LONG, SLOT_HASH);
                if (hs == 0) {
                    return null; // a never-used slot ends the probe
                }
                if (hs != h || !nameMatches(nameBytes)) {
                    break;
                }
                long block = slotCopy.get(ValueLayout.JAVA_LONG, SLOT_CURRENT);
                long length = slotCopy.get(ValueLayout.JAVA_LONG, SLOT_CURRENT_LENGTH);
                long version = slotCopy.get(ValueLayout.JAVA_LONG, SLOT_VERSION);
                if (block < 0) {
                    return null;
                }
                // acquire (copy order): the generation is read first, then the version it publishes
                long gen = generation(owner, block);
                read(owner, heap + block, header.asSlice(0, 24));
                if ((gen & 1) == 0 || header.get(ValueLayout.JAVA_LONG, BLOCK_VERSION) != version
                        || generation(owner, block) != gen) {
                    continue; // freed or reused since the slot was read: read the slot again
                }
                touch(owner, slot);
                MemorySegment data = MemorySegment.ofAddress(parts[owner] + heap + block + BLOCK_HEADER_BYTES)
                        .reinterpret(length);
                return new View(name, owner, version, data, this, block, gen);
            }
        }
        return null;
    }

    long generation(int owner, long block) {
        return readWord(owner, heap + block + BLOCK_GENERATION);
    }

    /**
     * Records this get as the entry's latest use, for its owner's LRU: one 8-byte copy of the time into the owner's
     * last-use tick, as mapped on this rank's GPU. No ordering: a tick is a hint the owner reads when it evicts, never
     * data it publishes; a tick lost to a race only changes which entry goes first.
     */
    private void touch(int owner, int slot) {
        word.set(ValueLayout.JAVA_LONG, 0, System.nanoTime());
        long at = parts[owner] + ParameterCacheLayout.lastUseOffset(slots, slot);
        gpu.copyFromHost(MemorySegment.ofAddress(at).reinterpret(Long.BYTES), word);
    }

    private long readWord(int owner, long offset) {
        read(owner, offset, word);
        return word.get(ValueLayout.JAVA_LONG, 0);
    }

    /** One synchronous copy of rank {@code owner}'s memory, as mapped on this rank's GPU, to the host. */
    private void read(int owner, long offset, MemorySegment dst) {
        gpu.copyToHost(dst, MemorySegment.ofAddress(parts[owner] + offset).reinterpret(dst.byteSize()));
    }

    private void awaitStable(int owner, long s, long odd) {
        WaitSubject subject = SharedMemories.waitFor(group, owner, "device parameter cache get",
                () -> "its entry being written (slot offset=" + s + ")", "an owner writes a slot this long only when"
                        + " it is stopped: check that rank, or raise symmem4j.timeout.ms");
        waiter.begin();
        while (readWord(owner, s + SLOT_WORD) == odd) {
            waiter.idle(subject);
        }
    }

    private boolean nameMatches(byte[] nameBytes) {
        return slotCopy.get(ValueLayout.JAVA_INT, SLOT_NAME_LENGTH) == nameBytes.length
                && MemorySegment.mismatch(slotCopy, SLOT_NAME, SLOT_NAME + nameBytes.length,
                MemorySegment.ofArray(nameBytes), 0, nameBytes.length) == -1;
    }

    /**
     * The names this rank's part evicted by its budget or entry limit (least recently used first, never a
     * {@link #remove}) since the last call, in eviction order; owner side, for layers that tell an evicted entry from
     * one that never existed (the GPU session cache).
     *
     * @return the evicted names, possibly empty; the list is this rank's to keep
     */
    public List<String> takeEvicted() {
        List<String> out = List.copyOf(evicted);
        evicted.clear();
        return out;
    }

    /** {@return entries this rank owns now} */
    public int ownEntries() {
        return directory.size();
    }

    /** Collective: frees the cache's memory once every rank has stopped using it; views become unusable. */
    @Override
    public void close() {
        try {
            memory.close();
        } finally {
            arena.close();
        }
    }
}
