package org.symmem4j.state;

import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_CURRENT;
import static org.symmem4j.parallel.layout.ParameterCacheLayout.SLOT_PREVIOUS;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongConsumer;

import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.layout.ParameterCacheLayout;
import org.symmem4j.parallel.sync.WaitSubject;
import org.symmem4j.parallel.sync.Waiter;

/**
 * The directory of a parameter cache whose blocks live outside host memory ({@link DeviceParameterCache}: GPU memory),
 * kept in host memory that the group's ranks share ({@link Group#hostTransport()}: threads of one JVM, or
 * {@code /dev/shm} mapped by every process), laid out as {@link ParameterCacheLayout}'s GPU form: the host cache's
 * header, slots and last-use ticks, then each slot's two block generations. So a reader's lookup is host loads under
 * the slot's seqlock (no device copy), its use a host store into the owner's tick, and a view's check after use two
 * host loads; only the bytes themselves are device memory, read by the reader's kernels or copies.
 *
 * <p>The owner's side is {@link CacheDirectory} (the host cache's policy) over this memory: a put {@link #put}s its
 * bytes into a fresh block through the caller's writer, then publishes the block's generation and the slot in one
 * seqlock write; a slot's change that drops a block (the next put's move to previous and free, an eviction, a remove)
 * drops its generation in the same write, before the owner reuses the range. A writer that throws gives the range
 * back.
 *
 * <p>Ordering across host and GPU: the owner's data copy completes (the call returns after it) before its slot's even
 * word is stored with release; a reader that acquires that word and then starts its own copy reads the whole data. The
 * owner reuses a freed range only by a copy it starts after the store that dropped the generation; a reader whose
 * copy completed before its check reads the generation still listed, so the overwrite had not started.
 *
 * One thread per rank uses an instance; knows nothing of GPUs (tested on host groups).
 */
final class SharedDirectory implements AutoCloseable {

    /**
     * One stable read of an entry: where its current block is and which generation it was published with.
     *
     * @param owner      the owner rank
     * @param slot       its slot (where its generations are listed)
     * @param block      the block's heap offset (data at +64)
     * @param length     the data bytes
     * @param version    the version
     * @param generation the block's generation, odd
     */
    record Found(int owner, int slot, long block, long length, long version, long generation) {
    }

    private final String structure;
    private final Group group;
    private final SymmetricMemory memory;
    private final int slots;
    private final MemorySegment[] parts;
    private final MemorySegment mine;
    private final Waiter waiter;
    private final DirectoryProbe.Snapshot snapshot = new DirectoryProbe.Snapshot();
    /** One waiter per owner, made once, so that a lookup or a poll of the version allocates none. */
    private final DirectoryProbe.StableWait[] stableWaits;
    private final VersionPoll poll = new VersionPoll();

    // ---- owner side ----
    private final CacheDirectory directory;
    /** The generation of every live block of this rank's part, by heap offset. */
    private final Map<Long, Long> generations = new HashMap<>();
    /** Names this rank's part evicted by the budget policy since the last {@link #takeEvicted()}. */
    private final List<String> evicted = new ArrayList<>();
    private long lastVersion;

    private SharedDirectory(String structure, Group group, SymmetricMemory memory, int slots, long heapBytes) {
        this.structure = structure;
        this.group = group;
        this.memory = memory;
        this.slots = slots;
        this.parts = new MemorySegment[group.worldSize()];
        for (int r = 0; r < parts.length; r++) {
            parts[r] = memory.peer(r);
        }
        this.mine = memory.local();
        this.waiter = SharedMemories.waiter(group);
        this.stableWaits = new DirectoryProbe.StableWait[parts.length];
        for (int r = 0; r < parts.length; r++) {
            int owner = r;
            stableWaits[r] = (so, odd) -> awaitStable(owner, so, odd);
        }
        this.directory = new CacheDirectory(structure, group.rank(), slots, heapBytes, mine, new Part());
    }

    /**
     * Collective: every rank's directory in host memory of the group's ranks, formatted and verified.
     *
     * @param group     this rank's group (of any transport: its host transport carries the directory)
     * @param structure the cache's name, for messages
     * @param slots     directory slots (maxEntries)
     * @param heapBytes the heap's bytes, 64-byte aligned
     * @return this rank's directory; close it collectively
     * @throws UnsupportedOperationException where the group's host memory is not mapped in every rank's process
     */
    static SharedDirectory create(Group group, String structure, int slots, long heapBytes) {
        long bytes = ParameterCacheLayout.deviceDirectoryBytes(slots);
        SymmetricMemory memory = group.hostTransport().allocate(group, bytes);
        try {
            if (!memory.hostAddressable()) {
                throw new UnsupportedOperationException(structure + " on transport=" + group.hostTransport().name()
                        + ": its host memory is not mapped in this process, where the directory must be read by host"
                        + " loads (fix: create it on a group of one machine, a Group.split by machine)");
            }
            memory.local().fill((byte) 0); // every slot's generations 0: none
            ParameterCacheLayout.format(memory.local(), slots, heapBytes, group.rank());
            memory.barrier(); // every directory's header, written before it, is visible to every rank after it
            for (int r = 0; r < group.worldSize(); r++) {
                ParameterCacheLayout.verify(memory.peer(r), slots, heapBytes, r);
            }
            return new SharedDirectory(structure, group, memory, slots, heapBytes);
        } catch (RuntimeException e) {
            memory.close();
            throw e;
        }
    }

    // ------------------------------------------------------------------------------------------ owner side

    /**
     * Puts a version of {@code name}: makes room (the host cache's policy), hands the fresh block's heap offset to
     * {@code writer}, which must return once the bytes are in place (data at +64), then publishes it. A writer that
     * throws gives the block's range (and a slot claimed for this put) back, and the exception propagates.
     *
     * @param name      the entry's name
     * @param nameBytes its checked UTF-8 bytes
     * @param length    the data bytes
     * @param version   the version, above every version this rank put before ({@code <= 0}: the next one)
     * @param writer    writes the data into the block at the given heap offset
     * @return the version published
     * @throws IllegalArgumentException for a version not above the last one, or data that cannot fit the budget
     *         beside the version it replaces (before anything is written)
     * @throws IllegalStateException when no contiguous range is left after every other entry was freed
     */
    long put(String name, byte[] nameBytes, long length, long version, LongConsumer writer) {
        long v = version <= 0 ? lastVersion + 1 : version;
        if (v <= lastVersion) {
            throw new IllegalArgumentException(structure + " put of '" + name + "': version=" + version + " expected"
                    + " above this rank's last version=" + lastVersion + " (versions increase with every put of an"
                    + " owner; fix: pass a larger version, or none for the next one)");
        }
        CacheDirectory.Room room = directory.makeRoom(name, nameBytes, length);
        try {
            writer.accept(room.block());
        } catch (RuntimeException | Error e) {
            directory.abandon(room); // no reader was shown the block: its generation was never listed
            throw e;
        }
        lastVersion = v;
        generations.put(room.block(), directory.nextGeneration()); // listed by the publish's endWrite below
        directory.publish(room.slot(), room.block(), length, v);
        return v;
    }

    /**
     * Removes {@code name}; views of it read invalid.
     *
     * @param name the entry's name
     * @return true when it was there
     */
    boolean remove(String name) {
        return directory.remove(name);
    }

    /** {@return names this rank owns now} */
    int size() {
        return directory.size();
    }

    /** {@return heap bytes of this rank's part in free ranges} (tests: a failed put gives its range back) */
    long freeBytes() {
        return directory.freeBytes();
    }

    /** {@return the names evicted by the budget since the last call, in eviction order} */
    List<String> takeEvicted() {
        List<String> out = List.copyOf(evicted);
        evicted.clear();
        return out;
    }

    /** This rank's part in shared host memory: the host cache's seqlock, and each slot's generations inside it. */
    private final class Part implements CacheDirectory.Part {
        @Override
        public long beginWrite(long slot) {
            return ParameterCacheLayout.beginWrite(mine, slot);
        }

        /** The slot's generations, from the blocks it lists now, then its even word. */
        @Override
        public void endWrite(long slot, long odd) {
            int i = (int) ((slot - ParameterCacheLayout.slotOffset(0)) / ParameterCacheLayout.LINE_BYTES);
            ParameterCacheLayout.setGenerations(mine, slots, i, generationOf(slot + SLOT_CURRENT),
                    generationOf(slot + SLOT_PREVIOUS));
            // release (inside): publishes the slot's fields and generations, and the block's data that the writer
            // completed before; pairs with the reader's wordAcquire in DirectoryProbe.find
            ParameterCacheLayout.endWrite(mine, slot, odd);
        }

        private long generationOf(long field) {
            long block = mine.get(ValueLayout.JAVA_LONG, field);
            return block < 0 ? 0 : generations.get(block);
        }

        /** Nothing to write: the slot's change that dropped the block dropped its generation (endWrite, before). */
        @Override
        public void retire(long block) {
            generations.remove(block);
        }

        @Override
        public void touch(int i) {
            ParameterCacheLayout.touch(mine, slots, i, System.nanoTime());
        }

        @Override
        public long[] lastUses() {
            return ParameterCacheLayout.lastUses(mine, slots);
        }

        @Override
        public void evicted(String name) {
            evicted.add(name);
        }
    }

    // ------------------------------------------------------------------------------------------ reader side

    /**
     * The current version of {@code name} in rank {@code owner}'s part: host loads only; counts as a use (the owner's
     * LRU).
     *
     * @param owner     the owner rank
     * @param name      the entry's name
     * @param nameBytes its checked UTF-8 bytes
     * @param h         their hash
     * @return where it is, or null when that rank has no version of it
     * @throws IllegalStateException naming the entry when its slot lists a block that is not published (a broken
     *         directory), instead of reading it again forever
     */
    Found lookup(int owner, String name, byte[] nameBytes, long h) {
        MemorySegment dir = parts[owner];
        DirectoryProbe.Snapshot s = snapshot;
        if (!DirectoryProbe.find(dir, slots, nameBytes, h, true, s, stableWaits[owner])) {
            return null;
        }
        if (s.block < 0) {
            return null; // the name, with no version yet
        }
        if ((s.generation & 1) == 0) {
            // the window was stable, so this is what the slot says now: no later read can see it otherwise
            throw DirectoryProbe.broken(structure, name, owner, s, "generation=" + s.generation + " (even: none or"
                    + " freed)");
        }
        ParameterCacheLayout.touch(dir, slots, s.slot, System.nanoTime()); // opaque: a hint for the owner's LRU
        return new Found(owner, s.slot, s.block, s.length, s.version, s.generation);
    }

    /**
     * The current version of {@code name} in rank {@code owner}'s part, without a view and without counting as a use
     * ({@link VersionPoll}: allocates nothing when polled by the same name again).
     *
     * @param owner the owner rank
     * @param name  the entry's name
     * @return the version a lookup returns now, or -1 when that rank has no version of it
     */
    long version(int owner, String name) {
        return poll.version(parts[owner], slots, name, stableWaits[owner]);
    }

    /**
     * Whether rank {@code owner}'s slot still lists {@code generation}: a view's check after its reads completed.
     *
     * @param owner      the owner rank
     * @param slot       the view's slot
     * @param generation the view's generation
     * @return true while the block holds the view's version
     */
    boolean holds(int owner, long slot, long generation) {
        // acquire inside (with a loadLoad fence first): pairs with the owner's release in setGenerations, which its
        // endWrite stores before any copy that reuses a dropped block's range
        return ParameterCacheLayout.generationsHold(parts[owner], slots, (int) slot, generation);
    }

    private void awaitStable(int owner, long s, long odd) {
        WaitSubject subject = SharedMemories.waitFor(group, owner, structure + " get",
                () -> "its entry being written (slot offset=" + s + ")", "an owner writes a slot this long only when"
                        + " it is stopped: check that rank, or raise symmem4j.timeout.ms");
        waiter.begin();
        while (ParameterCacheLayout.wordAcquire(parts[owner], s) == odd) {
            waiter.idle(subject);
        }
    }

    /** The directory memory, for tests that break a slot on purpose. */
    MemorySegment local() {
        return mine;
    }

    /** Collective: frees the directories once every rank has stopped using them. */
    @Override
    public void close() {
        memory.close();
    }
}
