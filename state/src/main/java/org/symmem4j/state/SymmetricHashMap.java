package org.symmem4j.state;

import static org.symmem4j.parallel.layout.HashMapLayout.DEAD;
import static org.symmem4j.parallel.layout.HashMapLayout.EMPTY;
import static org.symmem4j.parallel.layout.HashMapLayout.FULL;
import static org.symmem4j.parallel.layout.HashMapLayout.LOCKED;
import static org.symmem4j.parallel.layout.HashMapLayout.REMOVED;
import static org.symmem4j.parallel.layout.HashMapLayout.SLOT_HASH;
import static org.symmem4j.parallel.layout.HashMapLayout.SLOT_KEY;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;

import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.layout.HashMapLayout;
import org.symmem4j.parallel.sync.WaitSubject;
import org.symmem4j.parallel.sync.Waiter;

/**
 * A fixed-capacity hash map of fixed-size keys and values in symmetric memory, shared by every rank of a group:
 * a key's hash picks its owner rank's partition and a slot in it (open addressing, linear probing), and any rank
 * puts, gets, removes and computes there directly, by CAS on the owner's mapped memory, with no message to the
 * owner. Chronicle Map's shared off-heap map is the model of use; the mechanism is a seqlock per slot.
 *
 * <pre>{@code
 * try (SymmetricHashMap map = SymmetricHashMap.create(group, 8, 64, 1 << 16)) {   // collective
 *     map.put(42L, value);                          // any rank
 *     boolean found = map.get(42L, dst);            // any rank: copies the value out
 *     map.compute(42L, (cur, next) -> { ...; return true; });   // atomic read-modify-write
 * }
 * }</pre>
 *
 * <ul>
 *   <li><b>Slots</b>: each slot has one 64-bit word: state, seqlock version and, while a writer holds it, the
 *       writer's rank ({@link HashMapLayout}). A writer locks the slot by CAS, writes, and unlocks with a release
 *       store of the next version. A reader copies key and value between two acquire reads of the word and
 *       retries when they differ, so it never returns a torn value and never waits for a reader.</li>
 *   <li><b>Crashes</b>: a writer that dies holding a slot leaves it LOCKED; the next rank that needs the slot
 *       finds the holder dead and retires the slot (DEAD): the entry is gone, never half-written. Waiting for a
 *       live holder is bounded by the group's timeout and names it.</li>
 *   <li><b>Capacity</b>: {@code slotsPerRank} slots per rank, a power of two. A key keeps its slot once written,
 *       also after {@link #remove} (a later put of the same key revives it), so two puts of one key always meet at
 *       one slot; the map is for a bounded set of keys (ids, names, parameters), not for churning through
 *       unbounded fresh keys. A put that finds no slot throws {@link MapFullException} naming the owner.</li>
 *   <li><b>Sizes</b>: every key is exactly {@link #keyBytes()} and every value {@link #valueBytes()} bytes; other
 *       sizes are refused before anything is written.</li>
 * </ul>
 *
 * One thread per rank uses an instance. Where the group spans machines, creation is refused with the transport's
 * reason; on a group of GPU memory it is refused with the GPU form to use instead, {@link DeviceHashMap} (the same
 * slots and words, operated by kernels on the caller's stream).
 */
public final class SymmetricHashMap implements AutoCloseable {

    /** Computes a key's next value from its current one, under the slot's lock: keep it short. */
    @FunctionalInterface
    public interface ValueFunction {
        /**
         * @param current the current value, or null when the key is absent (read-only, valid during the call)
         * @param next    where to write the next value: on entry a copy of the current one, or zeros
         * @return true to store {@code next}, false to remove the key (or leave it absent)
         */
        boolean apply(MemorySegment current, MemorySegment next);
    }

    private static final int LIVENESS_POLLS = 1024;

    private final Group group;
    private final SymmetricMemory memory;
    private final int keyBytes;
    private final int valueBytes;
    private final int slots;
    private final int slotBytes;
    private final int valueOffset;
    private final MemorySegment[] partitions;
    private final Waiter waiter;
    private final Arena scratchArena = Arena.ofShared();
    private final MemorySegment longKey;
    private final MemorySegment current;
    private final MemorySegment next;

    private SymmetricHashMap(Group group, SymmetricMemory memory, int keyBytes, int valueBytes, int slots) {
        this.group = group;
        this.memory = memory;
        this.keyBytes = keyBytes;
        this.valueBytes = valueBytes;
        this.slots = slots;
        this.slotBytes = HashMapLayout.slotBytes(keyBytes, valueBytes);
        this.valueOffset = HashMapLayout.valueOffset(keyBytes);
        this.partitions = new MemorySegment[group.worldSize()];
        for (int r = 0; r < partitions.length; r++) {
            partitions[r] = memory.peer(r);
        }
        this.waiter = SharedMemories.waiter(group);
        this.longKey = scratchArena.allocate(Long.BYTES, Long.BYTES);
        this.current = scratchArena.allocate(Math.max(1, valueBytes), Long.BYTES);
        this.next = scratchArena.allocate(Math.max(1, valueBytes), Long.BYTES);
    }

    /**
     * Collective: a map with {@code slotsPerRank} slots in every rank's partition.
     *
     * @param group        this rank's group
     * @param keyBytes     bytes of every key, at least 1
     * @param valueBytes   bytes of every value, at least 0
     * @param slotsPerRank slots per rank, a power of two (keep the map at most ~70% full for short probes)
     * @return this rank's view of the map; close it collectively
     * @throws IllegalArgumentException for bad sizes (on every rank, before anything is allocated)
     * @throws UnsupportedOperationException where the group's transport cannot carry the map
     */
    public static SymmetricHashMap create(Group group, int keyBytes, int valueBytes, int slotsPerRank) {
        checkArguments(group, keyBytes, valueBytes, slotsPerRank);
        long bytes = HashMapLayout.partitionBytes(keyBytes, valueBytes, slotsPerRank);
        SymmetricMemory memory = SharedMemories.allocate(group, bytes, "hash map", "DeviceHashMap.create with the"
                + " group: a map in GPU memory whose operations are kernels on the caller's stream");
        try {
            HashMapLayout.format(memory.local(), keyBytes, valueBytes, slotsPerRank, group.worldSize(), group.rank());
            memory.barrier(); // every partition's header, written before it, is visible to every rank after it
            for (int r = 0; r < group.worldSize(); r++) {
                HashMapLayout.verify(memory.peer(r), keyBytes, valueBytes, slotsPerRank, group.worldSize(), r);
            }
            return new SymmetricHashMap(group, memory, keyBytes, valueBytes, slotsPerRank);
        } catch (RuntimeException e) {
            memory.close();
            throw e;
        }
    }

    /** The argument checks of {@link #create}, shared with {@link DeviceHashMap#create}. */
    static void checkArguments(Group group, int keyBytes, int valueBytes, int slotsPerRank) {
        Objects.requireNonNull(group, "group");
        if (keyBytes < 1 || valueBytes < 0) {
            throw new IllegalArgumentException("hash map keyBytes=" + keyBytes + " valueBytes=" + valueBytes
                    + " expected keyBytes >= 1 and valueBytes >= 0 (fix: pass the sizes of one key and one value)");
        }
        if (slotsPerRank < 1 || Integer.bitCount(slotsPerRank) != 1) {
            throw new IllegalArgumentException("hash map slotsPerRank=" + slotsPerRank + " expected a power of"
                    + " two >= 1 (fix: pass e.g. 1024, about 1.5x the keys each rank holds)");
        }
        if (group.worldSize() > HashMapLayout.MAX_RANKS) {
            throw new IllegalArgumentException("hash map: worldSize=" + group.worldSize() + " expected at most "
                    + HashMapLayout.MAX_RANKS
                    + " (fix: create it on a smaller group, e.g. a Group.split by machine)");
        }
    }

    /** {@return bytes of every key} */
    public int keyBytes() {
        return keyBytes;
    }

    /** {@return bytes of every value} */
    public int valueBytes() {
        return valueBytes;
    }

    /** {@return slots in every rank's partition} */
    public int slotsPerRank() {
        return slots;
    }

    /**
     * The rank whose partition holds {@code key}.
     *
     * @param key the key, {@link #keyBytes()} bytes
     * @return the owner rank
     */
    public int owner(MemorySegment key) {
        checkKey(key);
        return ownerOf(hash(key));
    }

    // ------------------------------------------------------------------------------------------ reads

    /**
     * Copies {@code key}'s value into {@code dst}, never torn: the copy is taken between two equal reads of the
     * slot's version.
     *
     * @param key the key, {@link #keyBytes()} bytes
     * @param dst at least {@link #valueBytes()} bytes
     * @return true when the key is present (dst filled), false when absent (dst untouched)
     * @throws IllegalArgumentException for a key or destination of the wrong size
     */
    public boolean get(MemorySegment key, MemorySegment dst) {
        checkKey(key);
        checkValue(dst, "destination", false);
        long hash = hash(key);
        MemorySegment part = partitions[ownerOf(hash)];
        int start = (int) hash & (slots - 1);
        for (int i = 0; i < slots; i++) {
            long off = HashMapLayout.slotOffset(slotBytes, (start + i) & (slots - 1));
            while (true) {
                // acquire: pairs with the release that unlocked the slot; its key and value are seen after it
                long word = HashMapLayout.wordAcquire(part, off);
                int state = HashMapLayout.state(word);
                if (state == EMPTY) {
                    return false;
                }
                if (state == LOCKED) {
                    awaitUnlocked(part, off, word);
                    continue;
                }
                if (state == DEAD || !keyMatches(part, off, hash, key)) {
                    if (HashMapLayout.wordAcquire(part, off) != word) {
                        continue; // the slot changed under the key read: read it again
                    }
                    break; // another key's slot: probe on
                }
                if (state == FULL) {
                    MemorySegment.copy(part, off + valueOffset, current, 0, valueBytes);
                }
                HashMapLayout.readFence(); // the key and value reads complete before the version is read again
                if (HashMapLayout.wordAcquire(part, off) != word) {
                    continue; // a writer came in between: the copy may be torn, take it again
                }
                if (state == REMOVED) {
                    return false; // the key's own slot: it is nowhere else
                }
                MemorySegment.copy(current, 0, dst, 0, valueBytes);
                return true;
            }
        }
        return false;
    }

    /**
     * {@link #get(MemorySegment, MemorySegment)} for 8-byte keys given as a long (little-endian bytes).
     *
     * @param key the key
     * @param dst at least {@link #valueBytes()} bytes
     * @return true when present
     * @throws IllegalArgumentException when the map's keys are not 8 bytes
     */
    public boolean get(long key, MemorySegment dst) {
        return get(longKey(key), dst);
    }

    // ------------------------------------------------------------------------------------------ writes

    /**
     * Puts {@code key -> value}, replacing any value.
     *
     * @param key   the key, {@link #keyBytes()} bytes
     * @param value the value, {@link #valueBytes()} bytes
     * @return true when the key was absent before
     * @throws MapFullException when the owner's partition has no slot for a new key
     * @throws IllegalArgumentException for a key or value of the wrong size
     */
    public boolean put(MemorySegment key, MemorySegment value) {
        checkValue(value, "value", true);
        boolean[] wasAbsent = {false};
        update(key, (cur, nxt) -> {
            wasAbsent[0] = cur == null;
            MemorySegment.copy(value, 0, nxt, 0, valueBytes);
            return true;
        }, true);
        return wasAbsent[0];
    }

    /**
     * {@link #put(MemorySegment, MemorySegment)} for 8-byte keys given as a long.
     *
     * @param key   the key
     * @param value the value
     * @return true when the key was absent before
     */
    public boolean put(long key, MemorySegment value) {
        return put(longKey(key), value);
    }

    /**
     * Puts {@code key -> value} only when the key is absent.
     *
     * @param key   the key
     * @param value the value
     * @return true when inserted, false when the key was present (its value unchanged)
     * @throws MapFullException when the owner's partition has no slot for a new key
     */
    public boolean putIfAbsent(MemorySegment key, MemorySegment value) {
        checkValue(value, "value", true);
        boolean[] inserted = {false};
        update(key, (cur, nxt) -> {
            if (cur != null) {
                return true; // keep the current value (nxt holds a copy of it)
            }
            inserted[0] = true;
            MemorySegment.copy(value, 0, nxt, 0, valueBytes);
            return true;
        }, true);
        return inserted[0];
    }

    /**
     * {@link #putIfAbsent(MemorySegment, MemorySegment)} for 8-byte keys given as a long.
     *
     * @param key   the key
     * @param value the value
     * @return true when inserted, false when the key was present (its value unchanged)
     * @throws IllegalArgumentException when the map's keys are not 8 bytes
     */
    public boolean putIfAbsent(long key, MemorySegment value) {
        return putIfAbsent(longKey(key), value);
    }

    /**
     * Removes {@code key}.
     *
     * @param key the key
     * @return true when it was present
     */
    public boolean remove(MemorySegment key) {
        boolean[] present = {false};
        update(key, (cur, nxt) -> {
            present[0] = cur != null;
            return false;
        }, false);
        return present[0];
    }

    /**
     * {@link #remove(MemorySegment)} for 8-byte keys given as a long.
     *
     * @param key the key
     * @return true when it was present
     */
    public boolean remove(long key) {
        return remove(longKey(key));
    }

    /**
     * Atomically replaces {@code key}'s value by what {@code fn} computes from it: no other writer of the key runs
     * between the read and the write (readers see the old value or the new one).
     *
     * @param key the key
     * @param fn  computes the next value; runs while this rank holds the slot, so keep it short and do not touch
     *            the map from it
     * @return true when the key is present afterwards
     * @throws MapFullException when the key is absent, {@code fn} keeps a value and the partition has no slot
     */
    public boolean compute(MemorySegment key, ValueFunction fn) {
        Objects.requireNonNull(fn, "fn");
        return update(key, fn, true);
    }

    /**
     * {@link #compute(MemorySegment, ValueFunction)} for 8-byte keys given as a long.
     *
     * @param key the key
     * @param fn  computes the next value
     * @return true when the key is present afterwards
     */
    public boolean compute(long key, ValueFunction fn) {
        return compute(longKey(key), fn);
    }

    /**
     * The one write path: finds the key's slot (or the first never-used slot of its probe), locks it, computes,
     * writes and unlocks.
     */
    private boolean update(MemorySegment key, ValueFunction fn, boolean mayInsert) {
        checkKey(key);
        long hash = hash(key);
        int owner = ownerOf(hash);
        MemorySegment part = partitions[owner];
        int start = (int) hash & (slots - 1);
        for (int i = 0; i < slots; i++) {
            long off = HashMapLayout.slotOffset(slotBytes, (start + i) & (slots - 1));
            while (true) {
                // acquire: pairs with the release that unlocked the slot; its key is seen after it
                long word = HashMapLayout.wordAcquire(part, off);
                int state = HashMapLayout.state(word);
                if (state == LOCKED) {
                    awaitUnlocked(part, off, word);
                    continue;
                }
                if (state == DEAD) {
                    break;
                }
                boolean mine = state == EMPTY || keyMatches(part, off, hash, key);
                if (!mine) {
                    break; // another key's slot (a key never leaves its slot): probe on
                }
                if (state == EMPTY && !mayInsert) {
                    return false; // absent, nothing to write
                }
                // CAS: the linearization point of this write; fails when the slot changed since the read
                if (!HashMapLayout.tryLock(part, off, word, group.rank())) {
                    continue;
                }
                long locked = HashMapLayout.wordAcquire(part, off);
                return writeLocked(part, off, locked, state, hash, key, fn);
            }
        }
        throw full(owner, slots);
    }

    /** The full-map error (the GPU form's too). */
    static MapFullException full(int owner, int slots) {
        return new MapFullException("hash map full: key's owner rank=" + owner + " has no free slot among slotsPerRank="
                + slots + " (keys keep their slots after remove; fix: create the map with more slots per rank,"
                + " and keep it at most ~70% full)", owner);
    }

    private boolean writeLocked(MemorySegment part, long off, long locked, int before, long hash, MemorySegment key,
                                ValueFunction fn) {
        boolean keep;
        try {
            if (before == FULL) {
                MemorySegment.copy(part, off + valueOffset, next, 0, valueBytes);
                MemorySegment.copy(part, off + valueOffset, current, 0, valueBytes);
                keep = fn.apply(current.asReadOnly(), next);
            } else {
                next.fill((byte) 0);
                keep = fn.apply(null, next);
            }
        } catch (RuntimeException | Error e) {
            HashMapLayout.unlockRelease(part, off, locked, before); // nothing was written: give the slot back
            throw e;
        }
        if (!keep) {
            // a removed key keeps its slot; a never-used slot given back stays never-used
            HashMapLayout.unlockRelease(part, off, locked, before == EMPTY ? EMPTY : REMOVED);
            return false;
        }
        if (before == EMPTY) {
            part.set(ValueLayout.JAVA_LONG, off + SLOT_HASH, hash);
            MemorySegment.copy(key, 0, part, off + SLOT_KEY, keyBytes);
        }
        MemorySegment.copy(next, 0, part, off + valueOffset, valueBytes);
        // release (inside): publishes key and value to every reader's acquire of the word
        HashMapLayout.unlockRelease(part, off, locked, FULL);
        return true;
    }

    /** Waits until the slot's word is no longer {@code locked}; retires the slot when its holder is dead. */
    private void awaitUnlocked(MemorySegment part, long off, long locked) {
        int holder = HashMapLayout.lockHolder(locked);
        WaitSubject subject = null;
        waiter.begin();
        int polls = 0;
        while (HashMapLayout.wordAcquire(part, off) == locked) {
            if (++polls % LIVENESS_POLLS == 0 && holder < group.worldSize() && !group.isAlive(holder)) {
                // CAS: the holder died holding the slot and writes no more; retiring happens once
                HashMapLayout.retire(part, off, locked);
                return;
            }
            if (subject == null) {
                subject = SharedMemories.waitFor(group, holder, "hash map slot wait",
                        () -> "the slot at offset=" + off + " it holds locked", "a writer holds a slot this long only"
                                + " when it is stopped: check that rank, or raise symmem4j.timeout.ms");
            }
            try {
                waiter.idle(subject);
            } catch (org.symmem4j.parallel.PeerTimeoutException e) {
                if (e.reason() == org.symmem4j.parallel.PeerTimeoutException.Reason.PEER_EXITED) {
                    HashMapLayout.retire(part, off, locked); // the holder is gone: retire its slot, then go on
                    return;
                }
                throw e;
            }
        }
    }

    private boolean keyMatches(MemorySegment part, long off, long hash, MemorySegment key) {
        return part.get(ValueLayout.JAVA_LONG, off + SLOT_HASH) == hash
                && MemorySegment.mismatch(part, off + SLOT_KEY, off + SLOT_KEY + keyBytes, key, 0, keyBytes) == -1;
    }

    /**
     * Rank-independent 64-bit hash of a key's bytes (every rank must compute the same one).
     *
     * @param key the key
     * @return the hash
     */
    static long hash(MemorySegment key) {
        long n = key.byteSize();
        long h = 0x9E3779B97F4A7C15L ^ n;
        long i = 0;
        for (; i + 8 <= n; i += 8) {
            h = mix(h ^ key.get(ValueLayout.JAVA_LONG_UNALIGNED, i));
        }
        long tail = 0;
        for (int shift = 0; i < n; i++, shift += 8) {
            tail |= (key.get(ValueLayout.JAVA_BYTE, i) & 0xFFL) << shift;
        }
        return mix(h ^ tail ^ 0x632BE59BD9B4E019L);
    }

    private static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    private int ownerOf(long hash) {
        return ownerOf(hash, partitions.length);
    }

    /** The owner rank of a key hash among {@code worldSize} partitions (the GPU form's too). */
    static int ownerOf(long hash, int worldSize) {
        return (int) Long.remainderUnsigned(hash >>> 32, worldSize);
    }

    private MemorySegment longKey(long key) {
        return longKey(longKey, keyBytes, key);
    }

    /** A long key as its 8 little-endian bytes in {@code scratch}; refused when the map's keys are not 8 bytes. */
    static MemorySegment longKey(MemorySegment scratch, int keyBytes, long key) {
        if (keyBytes != Long.BYTES) {
            throw new IllegalArgumentException("hash map key as a long (8 bytes), but the map's keyBytes=" + keyBytes
                    + " (fix: pass the key as a MemorySegment of " + keyBytes + " bytes)");
        }
        scratch.set(ValueLayout.JAVA_LONG, 0, key);
        return scratch;
    }

    private void checkKey(MemorySegment key) {
        checkKey(key, keyBytes);
    }

    /** Refuses a key of another size than the map's. */
    static void checkKey(MemorySegment key, int keyBytes) {
        Objects.requireNonNull(key, "key");
        if (key.byteSize() != keyBytes) {
            throw new IllegalArgumentException("hash map key bytes=" + key.byteSize() + " expected=" + keyBytes
                    + " (the map was created with keyBytes=" + keyBytes + "; fix: pass keys of that size)");
        }
    }

    private void checkValue(MemorySegment v, String what, boolean exact) {
        checkValue(v, what, exact, valueBytes);
    }

    /** Refuses a value (exact) or destination (at least) of another size than the map's. */
    static void checkValue(MemorySegment v, String what, boolean exact, int valueBytes) {
        Objects.requireNonNull(v, what);
        if (exact ? v.byteSize() != valueBytes : v.byteSize() < valueBytes) {
            throw new IllegalArgumentException("hash map " + what + " bytes=" + v.byteSize() + " expected "
                    + (exact ? "" : "at least ") + valueBytes + " (the map was created with valueBytes=" + valueBytes
                    + "; fix: pass values of that size)");
        }
    }

    /**
     * Counts the keys present in every partition, as seen by a scan now (concurrent writers move it).
     *
     * @return keys present
     */
    public long size() {
        long n = 0;
        for (MemorySegment part : partitions) {
            for (int s = 0; s < slots; s++) {
                if (HashMapLayout.state(HashMapLayout.wordAcquire(part, HashMapLayout.slotOffset(slotBytes, s))) == FULL) {
                    n++;
                }
            }
        }
        return n;
    }

    /** Collective: frees the map's memory once every rank has stopped using it. */
    @Override
    public void close() {
        try {
            memory.close();
        } finally {
            scratchArena.close();
        }
    }

    @Override
    public String toString() {
        return "SymmetricHashMap[keyBytes=" + keyBytes + ", valueBytes=" + valueBytes + ", slotsPerRank=" + slots
                + ", ranks=" + partitions.length + ", rank=" + group.rank() + "]";
    }
}
