package org.symmem4j.state;

import static org.symmem4j.parallel.layout.ParameterCacheLayout.BLOCK_HEADER_BYTES;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.BLOCK_LENGTH;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.BLOCK_VERSION;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;

import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.layout.ParameterCacheLayout;
import org.symmem4j.parallel.sync.WaitSubject;
import org.symmem4j.parallel.sync.Waiter;

/**
 * Named, versioned byte arrays (weights, LoRA adapters, embeddings) in symmetric memory: each rank {@link #put}s
 * entries into its own part within a byte budget, and every rank {@link #get}s them zero-copy, as a read-only view
 * of the owner's memory. The parameter-server use: the owner hot-swaps an entry by putting a new version, readers
 * switch to it with their next get, with no copy on their side.
 *
 * <pre>{@code
 * try (ParameterCache cache = ParameterCache.create(group, 256L << 20, 64)) {      // collective
 *     if (group.rank() == 0) cache.put("adapter/a", weights);                      // owner: copy in, publish
 *     ParameterCache.Entry e = cache.get("adapter/a");                             // any rank: zero-copy
 *     use(e.data());
 *     if (!e.isValid()) { ... }   // freed while read (two newer versions since): get it again
 * }
 * }</pre>
 *
 * <ul>
 *   <li><b>No torn entry</b>: a put writes a fresh block and then publishes it through the entry's seqlock; the
 *       data of a published version is never written again. The version it replaced stays readable until the next
 *       put of the name (a double buffer), so a reader that raced the writer reads the previous version whole. A
 *       view whose block was freed afterwards says so ({@link Entry#isValid()}); {@link #copy} retries for you.</li>
 *   <li><b>Budget</b>: each rank's part holds {@code budgetBytes} of data blocks (64-byte aligned, 64-byte header)
 *       and {@code maxEntries} names; a put that does not fit first frees previous versions, then evicts the least
 *       recently used entries (a get counts as a use).</li>
 *   <li><b>Versions</b>: unique per owner, increasing with every put.</li>
 * </ul>
 *
 * One thread per rank uses an instance. Where the group spans machines, creation is refused with the transport's
 * reason; on a group of GPU memory it is refused naming the GPU form, {@link DeviceParameterCache}.
 */
public final class ParameterCache implements AutoCloseable {

    /**
     * One version of an entry, as a zero-copy view of its owner's memory: name, owner, version, the bytes (read-only)
     * and {@link #isValid()}, the check after reading.
     */
    public static final class Entry extends CachedVersion {
        private Entry(String name, int owner, long version, MemorySegment data, ParameterCache cache, long block,
                      long generation) {
            super("ParameterCache.Entry", name, owner, version, data,
                    (o, b, g) -> cache.generation(o, b) == g, block, generation);
        }
    }

    static final long TOMBSTONE = -1;

    private final Group group;
    private final SymmetricMemory memory;
    private final int slots;
    private final long heap;
    private final MemorySegment[] parts;
    private final Waiter waiter;

    // ---- reader side: one waiter per owner, made once, so that a poll of the version allocates nothing ----
    private final DirectoryProbe.StableWait[] stableWaits;
    private final VersionPoll poll = new VersionPoll();

    // ---- owner side: this rank's part, known only here ----
    private final MemorySegment mine;
    private final CacheDirectory directory;
    private long nextVersion = 1;

    private ParameterCache(Group group, SymmetricMemory memory, int slots, long heapBytes) {
        this.group = group;
        this.memory = memory;
        this.slots = slots;
        this.heap = ParameterCacheLayout.heapOffset(slots);
        this.parts = new MemorySegment[group.worldSize()];
        for (int r = 0; r < parts.length; r++) {
            parts[r] = memory.peer(r);
        }
        this.mine = memory.local();
        this.waiter = SharedMemories.waiter(group);
        this.stableWaits = new DirectoryProbe.StableWait[parts.length];
        for (int r = 0; r < parts.length; r++) {
            int owner = r;
            stableWaits[r] = (so, odd) -> awaitStable(parts[owner], so, odd, owner);
        }
        this.directory = new CacheDirectory("parameter cache", group.rank(), slots, heapBytes, mine, new HostPart());
    }

    /**
     * Collective: a cache in which every rank may own up to {@code maxEntries} entries of {@code budgetBytes} in all.
     *
     * @param group       this rank's group
     * @param budgetBytes bytes of entry data (with a 64-byte header per block) each rank's part holds, at least 128
     * @param maxEntries  names each rank's part holds, at least 1
     * @return this rank's view; close it collectively
     * @throws IllegalArgumentException for a bad budget or entry count (on every rank, before any allocation)
     * @throws UnsupportedOperationException where the group's transport cannot carry the cache
     */
    public static ParameterCache create(Group group, long budgetBytes, int maxEntries) {
        Objects.requireNonNull(group, "group");
        checkArguments(budgetBytes, maxEntries);
        long heapBytes = ParameterCacheLayout.align64(budgetBytes);
        SymmetricMemory memory = SharedMemories.allocate(group, ParameterCacheLayout.totalBytes(maxEntries, heapBytes),
                "parameter cache", "DeviceParameterCache.create with a Communicator of the group");
        try {
            ParameterCacheLayout.format(memory.local(), maxEntries, heapBytes, group.rank());
            memory.barrier(); // every part's header, written before it, is visible to every rank after it
            for (int r = 0; r < group.worldSize(); r++) {
                ParameterCacheLayout.verify(memory.peer(r), maxEntries, heapBytes, r);
            }
            return new ParameterCache(group, memory, maxEntries, heapBytes);
        } catch (RuntimeException e) {
            memory.close();
            throw e;
        }
    }

    /** The argument checks of {@link #create}, shared with {@link DeviceParameterCache#create}. */
    static void checkArguments(long budgetBytes, int maxEntries) {
        if (budgetBytes < 2 * BLOCK_HEADER_BYTES || maxEntries < 1) {
            throw new IllegalArgumentException("parameter cache budgetBytes=" + budgetBytes + " maxEntries=" + maxEntries
                    + " expected budgetBytes >= " + 2 * BLOCK_HEADER_BYTES + " and maxEntries >= 1 (fix: size"
                    + " the budget for the largest version twice, a hot swap keeps both)");
        }
    }

    // ------------------------------------------------------------------------------------------ owner side

    /**
     * Puts a new version of {@code name} into this rank's part: copies {@code data} into a fresh block and
     * publishes it; readers switch to it with their next get. Frees previous versions and evicts least recently
     * used entries as needed.
     *
     * @param name the entry's name, 1..68 UTF-8 bytes
     * @param data the bytes
     * @return the new version
     * @throws IllegalArgumentException for a bad name, or data that cannot fit the budget beside the version it
     *         replaces (a hot swap keeps both until readers moved on)
     */
    public long put(String name, MemorySegment data) {
        byte[] nameBytes = ParameterCacheLayout.nameBytes(name);
        CacheDirectory.Room room = directory.makeRoom(name, nameBytes, data.byteSize());
        long block = room.block();
        try {
            MemorySegment.copy(data, 0, mine, heap + block + BLOCK_HEADER_BYTES, data.byteSize());
        } catch (RuntimeException | Error e) {
            directory.abandon(room); // the range back (no reader saw it: its generation is still even)
            throw e;
        }
        long version = nextVersion++;
        mine.set(ValueLayout.JAVA_LONG, heap + block + BLOCK_VERSION, version);
        mine.set(ValueLayout.JAVA_LONG, heap + block + BLOCK_LENGTH, data.byteSize());
        // release (inside): the data and header stores above are seen before the odd generation that publishes them
        ParameterCacheLayout.setGeneration(mine, heap, block, directory.nextGeneration());
        directory.publish(room.slot(), block, data.byteSize(), version);
        return version;
    }

    /**
     * Removes {@code name} from this rank's part; readers holding a view of it see {@link Entry#isValid()} false.
     *
     * @param name the entry's name
     * @return true when it was there
     */
    public boolean remove(String name) {
        return directory.remove(name);
    }

    static long blockBytes(long dataBytes) {
        return BLOCK_HEADER_BYTES + ParameterCacheLayout.align64(dataBytes);
    }

    /** This rank's part in host memory: the directory's changes are stores into it, with the layout's orderings. */
    private final class HostPart implements CacheDirectory.Part {
        @Override
        public long beginWrite(long slot) {
            return ParameterCacheLayout.beginWrite(mine, slot);
        }

        @Override
        public void endWrite(long slot, long odd) {
            ParameterCacheLayout.endWrite(mine, slot, odd); // release: inside, pairs with lookup's wordAcquire
        }

        @Override
        public void retire(long block) {
            long gen = ParameterCacheLayout.generationAcquire(mine, heap, block);
            // release (inside, with a storeStore fence): views read invalid before the range is written again
            ParameterCacheLayout.setGeneration(mine, heap, block, gen + 1);
        }

        @Override
        public void touch(int i) {
            ParameterCacheLayout.touch(mine, slots, i, System.nanoTime());
        }

        @Override
        public long[] lastUses() {
            return ParameterCacheLayout.lastUses(mine, slots);
        }
    }

    // ------------------------------------------------------------------------------------------ reader side

    /**
     * The current version of {@code name}, looked up in this rank's part first, then in the other ranks' in rank
     * order.
     *
     * @param name the entry's name
     * @return the entry, or null when no rank has it
     */
    public Entry get(String name) {
        byte[] nameBytes = ParameterCacheLayout.nameBytes(name);
        long h = hash(nameBytes);
        for (int i = 0; i < parts.length; i++) {
            int owner = (group.rank() + i) % parts.length;
            Entry e = lookup(owner, name, nameBytes, h);
            if (e != null) {
                return e;
            }
        }
        return null;
    }

    /**
     * The current version of {@code name} in rank {@code owner}'s part.
     *
     * @param owner the owner rank
     * @param name  the entry's name
     * @return the entry, or null when that rank does not have it
     */
    public Entry get(int owner, String name) {
        Objects.checkIndex(owner, parts.length);
        byte[] nameBytes = ParameterCacheLayout.nameBytes(name);
        return lookup(owner, name, nameBytes, hash(nameBytes));
    }

    /**
     * The current version of {@code name} in rank {@code owner}'s part, read without making a view: what a reader
     * waiting for a hot swap polls, calling {@link #get(int, String)} once the version changed. Allocates nothing when
     * called with the same name as the previous call (its bytes and hash are kept), so a spinning reader makes no
     * garbage, hence no collections. It does not count as a use for the owner's LRU order.
     *
     * @param owner the owner rank
     * @param name  the entry's name
     * @return the version a get would return now, or -1 when that rank has no version of the name
     */
    public long version(int owner, String name) {
        Objects.checkIndex(owner, parts.length);
        return poll.version(parts[owner], slots, name, stableWaits[owner]);
    }

    /**
     * Copies the current version of {@code name} into {@code dst}, whole: retries while the owner frees what it read.
     *
     * @param name the entry's name
     * @param dst  at least the entry's bytes
     * @return the version copied, or -1 when no rank has the name
     * @throws IllegalArgumentException when {@code dst} is smaller than the entry
     */
    public long copy(String name, MemorySegment dst) {
        while (true) {
            Entry e = get(name);
            if (e == null) {
                return -1;
            }
            if (dst.byteSize() < e.data().byteSize()) {
                throw new IllegalArgumentException("parameter cache copy of '" + name + "': destination bytes="
                        + dst.byteSize() + " expected at least " + e.data().byteSize() + " (fix: pass a destination of"
                        + " at least the entry's size, get(name).data().byteSize() bytes)");
            }
            MemorySegment.copy(e.data(), 0, dst, 0, e.data().byteSize());
            if (e.isValid()) {
                return e.version();
            }
        }
    }

    private Entry lookup(int owner, String name, byte[] nameBytes, long h) {
        MemorySegment part = parts[owner];
        DirectoryProbe.Snapshot s = new DirectoryProbe.Snapshot();
        long stuckWord = -1;
        int stuck = 0;
        while (DirectoryProbe.find(part, slots, nameBytes, h, false, s, stableWaits[owner])) {
            if (s.block < 0) {
                return null; // the name, with no version yet
            }
            // acquire: pairs with the owner's release of the generation; the block's header and data are seen
            long gen = ParameterCacheLayout.generationAcquire(part, heap, s.block);
            long held = part.get(ValueLayout.JAVA_LONG, heap + s.block + BLOCK_VERSION);
            if ((gen & 1) != 0 && held == s.version && generation(owner, s.block) == gen) {
                ParameterCacheLayout.touch(part, slots, s.slot, System.nanoTime());
                MemorySegment data = part.asSlice(heap + s.block + BLOCK_HEADER_BYTES, s.length).asReadOnly();
                return new Entry(name, owner, s.version, data, this, s.block, gen);
            }
            // freed or reused since the slot was read: read the slot again, which its owner changed first; a slot
            // whose word stays the same while its block stays unpublished is broken, not racing
            stuck = s.word == stuckWord ? stuck + 1 : 1;
            stuckWord = s.word;
            if (stuck >= DirectoryProbe.STUCK_READS) {
                throw DirectoryProbe.broken("parameter cache", name, owner, s, "generation=" + gen + ((gen & 1) == 0
                        ? " (even: freed)" : " (odd)") + " holding version=" + held);
            }
        }
        return null;
    }

    long generation(int owner, long block) {
        VarHandleFences.loadLoad(); // the caller's data reads complete before the generation is read again
        return ParameterCacheLayout.generationAcquire(parts[owner], heap, block);
    }

    private void awaitStable(MemorySegment part, long s, long odd, int owner) {
        WaitSubject subject = SharedMemories.waitFor(group, owner, "parameter cache get",
                () -> "its entry being written (slot offset=" + s + ")", "an owner writes a slot this long only when"
                        + " it is stopped: check that rank, or raise symmem4j.timeout.ms");
        waiter.begin();
        while (ParameterCacheLayout.wordAcquire(part, s) == odd) {
            waiter.idle(subject);
        }
    }

    static long hash(byte[] b) {
        long h = SymmetricHashMap.hash(MemorySegment.ofArray(b));
        return h == 0 || h == TOMBSTONE ? 1 : h;
    }

    /** {@return this rank's part, for tests that break it on purpose} */
    MemorySegment localPart() {
        return mine;
    }

    /** {@return entries this rank owns now} */
    public int ownEntries() {
        return directory.size();
    }

    /** Collective: frees the cache's memory once every rank has stopped using it; views become unusable. */
    @Override
    public void close() {
        memory.close();
    }

    /** The one fence a reader's validation needs, named. */
    private static final class VarHandleFences {
        static void loadLoad() {
            java.lang.invoke.VarHandle.loadLoadFence();
        }
    }
}
