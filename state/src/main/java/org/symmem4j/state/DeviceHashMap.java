package org.symmem4j.state;

import static org.symmem4j.parallel.layout.HashMapLayout.EMPTY;
import static org.symmem4j.parallel.layout.HashMapLayout.FULL;
import static org.symmem4j.parallel.layout.HashMapLayout.REMOVED;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.Objects;

import org.symmem4j.parallel.DeviceMaps;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.layout.HashMapLayout;
import org.symmem4j.parallel.sync.WaitSubject;
import org.symmem4j.parallel.sync.Waiter;
import org.symmem4j.state.SymmetricHashMap.ValueFunction;

/**
 * The GPU form of {@link SymmetricHashMap}: a fixed-capacity hash map of fixed-size keys and values whose partitions
 * lie in the ranks' GPU symmetric memory, with the host map's slots, slot words and probe ({@link HashMapLayout}): a
 * key's hash picks its owner's partition and a slot in it, and any rank puts, gets, removes and computes there
 * directly, through the owner's memory as mapped on its own GPU, with no message to the owner.
 *
 * <pre>{@code
 * try (DeviceHashMap map = DeviceHashMap.create(group, 8, 64, 1 << 16)) {   // collective, on a CUDA group
 *     map.put(42L, value);                          // any rank; key and value are host memory
 *     boolean found = map.get(42L, dst);            // copies the value out, never torn
 *     map.compute(42L, (cur, next) -> { ...; return true; });   // host-driven read-modify-write
 * }
 * }</pre>
 *
 * <ul>
 *   <li><b>What runs in kernels</b>: {@link #get}, {@link #put}, {@link #putIfAbsent} and {@link #remove} are each
 *       one small kernel ({@link DeviceMaps}, {@code symmem_map_op}) on this rank's stream, after the work enqueued
 *       there before; the call waits for it. The kernel probes the owner's partition, takes the slot with
 *       {@code atomicCAS} at system scope on its word (the linearization point; a remove is one CAS from FULL to
 *       REMOVED), writes key and value under that lock, fences at system scope and unlocks with a release store of
 *       the next version. A get copies the value between an acquire read of the word and a second read after a
 *       system-scope fence and starts over when they differ (seqlock): it never returns a torn value. The key and
 *       value travel in the kernel's launch parameters (at most {@link HashMapLayout#DEVICE_INLINE_BYTES} bytes
 *       together); the result comes back by one copy from this rank's own result area.</li>
 *   <li><b>What the host drives</b>: {@link #compute} runs a Java function, so it takes three steps: a kernel locks
 *       the key's slot by CAS (LOCKED, naming this rank) and copies its value out; the host copies it back and
 *       applies the function; one kernel writes the result and unlocks (or gives the slot back unchanged when the
 *       function throws). Other ranks' operations on that key wait for the unlock; operations on other keys do
 *       not.</li>
 *   <li><b>Waits and crashes</b>: a kernel waits for a LOCKED slot a short slice on the GPU, then answers busy with
 *       the holder's rank; the host relaunches until the group's timeout, then throws a
 *       {@link PeerTimeoutException} naming the holder. A holder found dead (its process gone, its context with it)
 *       has its slot retired by one CAS from its LOCKED word to DEAD: its entry is gone, never half-written; other
 *       ranks never read a LOCKED or DEAD slot as valid.</li>
 *   <li><b>Capacity and sizes</b>: as the host map: {@code slotsPerRank} a power of two, a key keeps its slot after
 *       a remove, a put that finds no slot throws {@link MapFullException} naming the owner; keys and values of
 *       another size than the map's are refused before anything is launched.</li>
 * </ul>
 *
 * One thread per rank uses an instance. Created on a group of GPU symmetric memory whose ranks map each other's
 * memory (CUDA on one machine); refused elsewhere (on a host group use {@link SymmetricHashMap}).
 */
public final class DeviceHashMap implements AutoCloseable {

    /** How long one kernel waits for a LOCKED slot before it hands the wait back to the host. */
    private static final long KERNEL_WAIT_NANOS = Duration.ofMillis(2).toNanos();

    private final Group group;
    private final SymmetricMemory memory;
    private final DeviceMaps maps;
    private final int keyBytes;
    private final int valueBytes;
    private final int slots;
    private final long outOffset;
    private final Waiter waiter;
    private final Arena arena = Arena.ofShared();
    /** Key and value words of the next operation (its launch parameters). */
    private final MemorySegment inline;
    /** The result area as copied back: result words, then the value. */
    private final MemorySegment out;
    private final MemorySegment longKey;
    private final MemorySegment current;
    private final MemorySegment next;

    private DeviceHashMap(Group group, SymmetricMemory memory, DeviceMaps maps, int keyBytes, int valueBytes,
                          int slots) {
        this.group = group;
        this.memory = memory;
        this.maps = maps;
        this.keyBytes = keyBytes;
        this.valueBytes = valueBytes;
        this.slots = slots;
        this.outOffset = HashMapLayout.deviceOutOffset(keyBytes, valueBytes, slots);
        this.waiter = SharedMemories.waiter(group);
        this.inline = arena.allocate(HashMapLayout.inlineBytes(keyBytes, valueBytes), Long.BYTES);
        this.out = arena.allocate(HashMapLayout.deviceOutBytes(valueBytes), Long.BYTES);
        this.longKey = arena.allocate(Long.BYTES, Long.BYTES);
        this.current = arena.allocate(Math.max(1, valueBytes), Long.BYTES).asSlice(0, valueBytes);
        this.next = arena.allocate(Math.max(1, valueBytes), Long.BYTES).asSlice(0, valueBytes);
    }

    /**
     * Collective: a map with {@code slotsPerRank} slots in every rank's partition, in GPU memory.
     *
     * @param group        this rank's group, of a GPU transport whose ranks map each other's memory
     * @param keyBytes     bytes of every key, at least 1
     * @param valueBytes   bytes of every value, at least 0; key and value padded to 8 bytes each at most
     *                     {@link HashMapLayout#DEVICE_INLINE_BYTES} together
     * @param slotsPerRank slots per rank, a power of two
     * @return this rank's view of the map; close it collectively
     * @throws IllegalArgumentException for bad sizes or ranks that disagree on them (on every rank, before anything
     *         is allocated)
     * @throws UnsupportedOperationException on a host group, or where peers' GPU memory is not mapped here
     */
    public static DeviceHashMap create(Group group, int keyBytes, int valueBytes, int slotsPerRank) {
        SymmetricHashMap.checkArguments(group, keyBytes, valueBytes, slotsPerRank);
        HashMapLayout.checkDeviceSizes(keyBytes, valueBytes);
        SharedMemories.agree(group, "device hash map", "device-map-create", "keyBytes=" + keyBytes + " valueBytes="
                + valueBytes + " slotsPerRank=" + slotsPerRank, "create the map on every rank with the same sizes");
        int world = group.worldSize();
        int rank = group.rank();
        // the barrier after the format: every partition zeroed with its header, before any rank's kernel probes it
        return SharedMemories.createOnDevice(group, HashMapLayout.deviceTotalBytes(keyBytes, valueBytes, slotsPerRank),
                "device hash map", DeviceMaps.class, "kernel-run map operations",
                "SymmetricHashMap.create on a host group, or a CUDA group",
                // zeroed: every slot EMPTY at version 0, the result area 0
                (memory, maps) -> SharedMemories.writeHeader(HashMapLayout.HEADER_BYTES,
                        header -> HashMapLayout.formatHeader(header, keyBytes, valueBytes, slotsPerRank, world, rank),
                        header -> memory.copyFromHost(header, 0),
                        // the copy back, after the zeroing and the header copy on the same copy queue, finds both done
                        back -> memory.copyToHost(0, back),
                        back -> HashMapLayout.verifyHeader(back, keyBytes, valueBytes, slotsPerRank, world, rank)),
                (memory, maps) -> new DeviceHashMap(group, memory, maps, keyBytes, valueBytes, slotsPerRank));
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
     * The rank whose partition holds {@code key} (the same as {@link SymmetricHashMap#owner} for the group's size).
     *
     * @param key the key, {@link #keyBytes()} bytes
     * @return the owner rank
     */
    public int owner(MemorySegment key) {
        SymmetricHashMap.checkKey(key, keyBytes);
        return SymmetricHashMap.ownerOf(SymmetricHashMap.hash(key), group.worldSize());
    }

    /**
     * Copies {@code key}'s value into {@code dst}, never torn (one kernel: a seqlock read, retried on the GPU when a
     * writer came in between).
     *
     * @param key the key, host memory of {@link #keyBytes()} bytes
     * @param dst host memory of at least {@link #valueBytes()} bytes
     * @return true when the key is present (dst filled), false when absent (dst untouched)
     * @throws IllegalArgumentException for a key or destination of the wrong size
     * @throws PeerTimeoutException naming the rank that holds the key's slot locked past the group's timeout
     */
    public boolean get(MemorySegment key, MemorySegment dst) {
        SymmetricHashMap.checkKey(key, keyBytes);
        SymmetricHashMap.checkValue(dst, "destination", false, valueBytes);
        if (run(HashMapLayout.OP_GET, key, null, 0, 0, 0) != HashMapLayout.RESULT_PRESENT) {
            return false;
        }
        MemorySegment.copy(out, HashMapLayout.DEVICE_OUT_VALUE, dst, 0, valueBytes);
        return true;
    }

    /**
     * {@link #get(MemorySegment, MemorySegment)} for 8-byte keys given as a long (little-endian bytes).
     *
     * @param key the key
     * @param dst at least {@link #valueBytes()} bytes
     * @return true when present
     */
    public boolean get(long key, MemorySegment dst) {
        return get(SymmetricHashMap.longKey(longKey, keyBytes, key), dst);
    }

    /**
     * Puts {@code key -> value}, replacing any value (one kernel).
     *
     * @param key   the key, host memory of {@link #keyBytes()} bytes
     * @param value the value, host memory of {@link #valueBytes()} bytes
     * @return true when the key was absent before
     * @throws MapFullException when the owner's partition has no slot for a new key
     * @throws IllegalArgumentException for a key or value of the wrong size
     */
    public boolean put(MemorySegment key, MemorySegment value) {
        SymmetricHashMap.checkKey(key, keyBytes);
        SymmetricHashMap.checkValue(value, "value", true, valueBytes);
        return run(HashMapLayout.OP_PUT, key, value, 0, 0, 0) == HashMapLayout.RESULT_ABSENT;
    }

    /**
     * {@link #put(MemorySegment, MemorySegment)} for 8-byte keys given as a long.
     *
     * @param key   the key
     * @param value the value
     * @return true when the key was absent before
     */
    public boolean put(long key, MemorySegment value) {
        return put(SymmetricHashMap.longKey(longKey, keyBytes, key), value);
    }

    /**
     * Puts {@code key -> value} only when the key is absent (one kernel).
     *
     * @param key   the key
     * @param value the value
     * @return true when inserted, false when the key was present (its value unchanged)
     * @throws MapFullException when the owner's partition has no slot for a new key
     */
    public boolean putIfAbsent(MemorySegment key, MemorySegment value) {
        SymmetricHashMap.checkKey(key, keyBytes);
        SymmetricHashMap.checkValue(value, "value", true, valueBytes);
        return run(HashMapLayout.OP_PUT_IF_ABSENT, key, value, 0, 0, 0) == HashMapLayout.RESULT_ABSENT;
    }

    /**
     * Removes {@code key} (one kernel: one CAS of its slot word from FULL to REMOVED).
     *
     * @param key the key
     * @return true when it was present
     */
    public boolean remove(MemorySegment key) {
        SymmetricHashMap.checkKey(key, keyBytes);
        return run(HashMapLayout.OP_REMOVE, key, null, 0, 0, 0) == HashMapLayout.RESULT_PRESENT;
    }

    /**
     * {@link #remove(MemorySegment)} for 8-byte keys given as a long.
     *
     * @param key the key
     * @return true when it was present
     */
    public boolean remove(long key) {
        return remove(SymmetricHashMap.longKey(longKey, keyBytes, key));
    }

    /**
     * Atomically replaces {@code key}'s value by what {@code fn} computes from it, <b>host-driven</b>: a kernel locks
     * the key's slot (CAS into LOCKED, naming this rank) and copies its value out, {@code fn} runs here on the host,
     * and one kernel writes its result and unlocks. No other writer of the key runs in between; readers of the key
     * wait for the unlock and then see the new value.
     *
     * @param key the key
     * @param fn  computes the next value; runs while this rank holds the slot, so keep it short and do not touch
     *            the map from it
     * @return true when the key is present afterwards
     * @throws MapFullException when the key is absent and the partition has no slot for it
     */
    public boolean compute(MemorySegment key, ValueFunction fn) {
        SymmetricHashMap.checkKey(key, keyBytes);
        Objects.requireNonNull(fn, "fn");
        int found = run(HashMapLayout.OP_LOCK, key, null, 0, 0, 0);
        long slot = out.get(ValueLayout.JAVA_LONG, 8);
        long locked = out.get(ValueLayout.JAVA_LONG, 16);
        int before = (int) out.get(ValueLayout.JAVA_LONG, 24);
        boolean keep;
        try {
            if (found == HashMapLayout.RESULT_PRESENT) {
                MemorySegment.copy(out, HashMapLayout.DEVICE_OUT_VALUE, current, 0, valueBytes);
                MemorySegment.copy(out, HashMapLayout.DEVICE_OUT_VALUE, next, 0, valueBytes);
                keep = fn.apply(current.asReadOnly(), next);
            } else {
                next.fill((byte) 0);
                keep = fn.apply(null, next);
            }
        } catch (RuntimeException | Error e) {
            run(HashMapLayout.OP_UNLOCK, key, null, slot, locked, before); // nothing written: the slot back as it was
            throw e;
        }
        // a removed key keeps its slot; a never-used slot given back stays never-used
        int state = keep ? FULL | HashMapLayout.UNLOCK_WRITE : before == EMPTY ? EMPTY : REMOVED;
        run(HashMapLayout.OP_UNLOCK, key, keep ? next : null, slot, locked, state);
        return keep;
    }

    /**
     * {@link #compute(MemorySegment, ValueFunction)} for 8-byte keys given as a long.
     *
     * @param key the key
     * @param fn  computes the next value
     * @return true when the key is present afterwards
     */
    public boolean compute(long key, ValueFunction fn) {
        return compute(SymmetricHashMap.longKey(longKey, keyBytes, key), fn);
    }

    /**
     * Runs one operation until it is not busy: a kernel that found the key's slot LOCKED past its slice answers
     * busy with the holder's word; a dead holder's slot is retired, a live one waited for (bounded, naming it).
     */
    private int run(int op, MemorySegment key, MemorySegment value, long slot, long word, int state) {
        long hash = SymmetricHashMap.hash(key);
        int owner = SymmetricHashMap.ownerOf(hash, group.worldSize());
        HashMapLayout.packInline(inline, key, value, keyBytes, valueBytes);
        WaitSubject subject = null;
        while (true) {
            int code = launch(new DeviceMaps.Operation(owner, op, hash, slot, word, state, KERNEL_WAIT_NANOS));
            if (code == HashMapLayout.RESULT_NO_SLOT) {
                throw SymmetricHashMap.full(owner, slots);
            }
            if (code != HashMapLayout.RESULT_BUSY) {
                return code;
            }
            long busySlot = out.get(ValueLayout.JAVA_LONG, 8);
            long locked = out.get(ValueLayout.JAVA_LONG, 16);
            int holder = HashMapLayout.lockHolder(locked);
            if (holder == group.rank()) {
                throw new IllegalStateException("device hash map: rank=" + holder + " waits for a slot it holds itself"
                        + " (fix: do not use the map from inside a compute function)");
            }
            if (holder >= group.worldSize() || !group.isAlive(holder)) {
                retire(owner, busySlot, locked);
                continue;
            }
            if (subject == null) {
                waiter.begin();
                subject = SharedMemories.waitFor(group, holder, "device hash map slot wait",
                        () -> "the slot at offset=" + busySlot + " of rank " + owner + "'s partition, which it holds"
                                + " locked", "a writer holds a slot this long only when it is stopped (a compute"
                                + " function that does not return?): check that rank, or raise symmem4j.timeout.ms");
            }
            try {
                waiter.idle(subject);
            } catch (PeerTimeoutException e) {
                if (e.reason() != PeerTimeoutException.Reason.PEER_EXITED) {
                    throw e;
                }
                retire(owner, busySlot, locked); // the holder is gone: retire its slot, then go on
            }
        }
    }

    /** CAS of a dead holder's LOCKED word to DEAD, by a kernel (whoever comes first retires it; once). */
    private void retire(int owner, long slot, long locked) {
        launch(new DeviceMaps.Operation(owner, HashMapLayout.OP_RETIRE, 0, slot, locked, 0, 0));
    }

    private int launch(DeviceMaps.Operation operation) {
        maps.runMapOperation(operation, inline, outOffset, out);
        return (int) out.get(ValueLayout.JAVA_LONG, 0);
    }

    /** Collective: frees the map's memory once every rank has stopped using it. */
    @Override
    public void close() {
        try {
            memory.close();
        } finally {
            arena.close();
        }
    }

    @Override
    public String toString() {
        return "DeviceHashMap[keyBytes=" + keyBytes + ", valueBytes=" + valueBytes + ", slotsPerRank=" + slots
                + ", ranks=" + group.worldSize() + ", rank=" + group.rank() + "]";
    }
}
