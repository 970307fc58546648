package org.symmem4j.parallel.layout;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * Layout of one rank's partition of a symmetric hash map: a header, then a power-of-two number of fixed-size
 * slots probed linearly. Each slot is guarded by one 64-bit word that is at once its state, its seqlock version
 * and, while it is being written, the writer's rank.
 *
 * <pre>
 *  offset                 field                                              written by           read by
 *  0                      HEADER: magic (int), version (int), key bytes      owner, once          every rank, verify
 *                         (int), value bytes (int), slots (int), world
 *                         size (int), owner rank (int)
 *  128 + s*slotBytes      SLOT s:
 *                           +0  word (long): bits 0-2 state, 3-23 the        any rank (CAS to     any rank (acquire,
 *                               writer's rank while LOCKED, 24-63 version    lock, release to     seqlock re-check)
 *                               (+1 at every unlock)                          unlock)
 *                           +8  key hash (long)                              the lock holder      any rank, between
 *                           +16 key (keyBytes, padded to 8)                  the lock holder      two reads of the word
 *                           +16+align8(keyBytes) value (valueBytes, to 8)    the lock holder
 * </pre>
 *
 * States: {@link #EMPTY} (never used: ends a probe), {@link #FULL} (key and value valid), {@link #REMOVED} (the
 * key stays: the slot is its key's for good, a later put of the same key revives it), {@link #LOCKED} (a writer
 * holds it), {@link #DEAD} (its writer died while holding it: retired, its key and value are gone). A key, once
 * written to a slot, is never overwritten by another key, so two puts of one key always meet at the same slot.
 *
 * <p>The GPU form ({@code org.symmem4j.state.DeviceHashMap}) keeps this partition unchanged in each rank's GPU memory
 * and adds, on the next line after it, the rank's own result area ({@link #deviceOutOffset}): four result words (the
 * code, a slot offset, a slot word, the state before) and, from {@link #DEVICE_OUT_VALUE}, one value. Its kernel
 * ({@code symmem_map_op} in {@code symmem4j_kernels.cu}) hard-codes the header offsets, the slot offsets, the states,
 * the operations ({@code OP_*}) and the results ({@code RESULT_*}) as {@code MAP_*} #defines, checked against these
 * by {@code HashMapLayoutDeviceTest}; key and value reach it in its launch parameters ({@link #packInline}).
 */
public final class HashMapLayout {

    /** Bytes of the header line. */
    public static final int HEADER_BYTES = 128;
    /** Header magic, {@code "SYHM"}. */
    public static final int MAGIC = 0x5359484D;
    /** Layout version. */
    public static final int VERSION = 1;

    /** Byte offset of the magic (int). */
    public static final long MAGIC_OFFSET = 0;
    /** Byte offset of the version (int). */
    public static final long VERSION_OFFSET = 4;
    /** Byte offset of the key size (int). */
    public static final long KEY_BYTES_OFFSET = 8;
    /** Byte offset of the value size (int). */
    public static final long VALUE_BYTES_OFFSET = 12;
    /** Byte offset of the slot count (int). */
    public static final long SLOTS_OFFSET = 16;
    /** Byte offset of the world size (int). */
    public static final long WORLD_SIZE_OFFSET = 20;
    /** Byte offset of the owner rank (int). */
    public static final long OWNER_OFFSET = 24;

    /** Slot state: never written; a probe for a key ends here. */
    public static final int EMPTY = 0;
    /** Slot state: key and value valid. */
    public static final int FULL = 1;
    /** Slot state: the key was removed; the slot stays its key's. */
    public static final int REMOVED = 2;
    /** Slot state: a writer holds the slot. */
    public static final int LOCKED = 3;
    /** Slot state: its writer died holding it; retired. */
    public static final int DEAD = 4;

    /** Byte offset of the key hash in a slot. */
    public static final int SLOT_HASH = 8;
    /** Byte offset of the key in a slot. */
    public static final int SLOT_KEY = 16;
    /** The most ranks a slot word can name. */
    public static final int MAX_RANKS = 1 << 21;

    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private HashMapLayout() {
    }

    /**
     * Bytes of one slot.
     *
     * @param keyBytes   key size
     * @param valueBytes value size
     * @return slot bytes, a multiple of 8
     */
    public static int slotBytes(int keyBytes, int valueBytes) {
        return SLOT_KEY + align8(keyBytes) + align8(valueBytes);
    }

    /**
     * Byte offset of the value in a slot.
     *
     * @param keyBytes key size
     * @return offset from the slot's start
     */
    public static int valueOffset(int keyBytes) {
        return SLOT_KEY + align8(keyBytes);
    }

    /**
     * Bytes of one rank's partition.
     *
     * @param keyBytes   key size
     * @param valueBytes value size
     * @param slots      slots per rank
     * @return partition bytes
     */
    public static long partitionBytes(int keyBytes, int valueBytes, int slots) {
        return HEADER_BYTES + (long) slots * slotBytes(keyBytes, valueBytes);
    }

    /**
     * Byte offset of slot {@code s}.
     *
     * @param slotBytes bytes per slot
     * @param s         the slot
     * @return offset in the partition
     */
    public static long slotOffset(int slotBytes, int s) {
        return HEADER_BYTES + (long) s * slotBytes;
    }

    private static int align8(int n) {
        return (n + 7) & -8;
    }

    /**
     * Writes the header of a fresh, empty partition (its owner, before the barrier that publishes it).
     *
     * @param part       the owner's buffer
     * @param keyBytes   key size
     * @param valueBytes value size
     * @param slots      slots
     * @param worldSize  ranks
     * @param owner      the owner's rank
     */
    public static void format(MemorySegment part, int keyBytes, int valueBytes, int slots, int worldSize, int owner) {
        part.asSlice(0, partitionBytes(keyBytes, valueBytes, slots)).fill((byte) 0);
        formatHeader(part, keyBytes, valueBytes, slots, worldSize, owner);
    }

    /**
     * Writes the header fields only (not the slots): for a partition in GPU memory, zeroed by copies and whose
     * header is staged in host memory first ({@code DeviceHashMap}).
     *
     * @param part       at least {@link #HEADER_BYTES} bytes
     * @param keyBytes   key size
     * @param valueBytes value size
     * @param slots      slots
     * @param worldSize  ranks
     * @param owner      the owner's rank
     */
    public static void formatHeader(MemorySegment part, int keyBytes, int valueBytes, int slots, int worldSize,
                                    int owner) {
        part.set(ValueLayout.JAVA_INT, MAGIC_OFFSET, MAGIC);
        part.set(ValueLayout.JAVA_INT, VERSION_OFFSET, VERSION);
        part.set(ValueLayout.JAVA_INT, KEY_BYTES_OFFSET, keyBytes);
        part.set(ValueLayout.JAVA_INT, VALUE_BYTES_OFFSET, valueBytes);
        part.set(ValueLayout.JAVA_INT, SLOTS_OFFSET, slots);
        part.set(ValueLayout.JAVA_INT, WORLD_SIZE_OFFSET, worldSize);
        part.set(ValueLayout.JAVA_INT, OWNER_OFFSET, owner);
    }

    /**
     * Checks that {@code part} is a partition of this layout with the expected facts.
     *
     * @param part       a rank's buffer as mapped here
     * @param keyBytes   expected key size
     * @param valueBytes expected value size
     * @param slots      expected slots
     * @param worldSize  expected ranks
     * @param owner      expected owner
     * @throws IllegalStateException naming the field that differs
     */
    public static void verify(MemorySegment part, int keyBytes, int valueBytes, int slots, int worldSize, int owner) {
        if (part.byteSize() < partitionBytes(keyBytes, valueBytes, slots)) {
            throw new IllegalStateException("hash map partition of rank " + owner + ": bytes=" + part.byteSize()
                    + " expected at least " + partitionBytes(keyBytes, valueBytes, slots) + " (fix: create the map"
                    + " on every rank with the same keyBytes, valueBytes and capacity)");
        }
        verifyHeader(part, keyBytes, valueBytes, slots, worldSize, owner);
    }

    /**
     * Checks the header fields only, as {@link #verify} does after its size check: for a header copied out of
     * memory the host cannot read in place (GPU memory).
     *
     * @param part       at least {@link #HEADER_BYTES} bytes: the header
     * @param keyBytes   expected key size
     * @param valueBytes expected value size
     * @param slots      expected slots
     * @param worldSize  expected ranks
     * @param owner      expected owner
     * @throws IllegalStateException naming the field that differs
     */
    public static void verifyHeader(MemorySegment part, int keyBytes, int valueBytes, int slots, int worldSize,
                                    int owner) {
        expect(part, MAGIC_OFFSET, "magic", MAGIC, owner, " (not a hash map: memory of another structure)");
        expect(part, VERSION_OFFSET, "version", VERSION, owner, " (ranks run different symmem4j versions)");
        expect(part, KEY_BYTES_OFFSET, "keyBytes", keyBytes, owner, " (every rank must pass the same key size)");
        expect(part, VALUE_BYTES_OFFSET, "valueBytes", valueBytes, owner, " (every rank must pass the same value size)");
        expect(part, SLOTS_OFFSET, "slots", slots, owner, " (every rank must pass the same capacity)");
        expect(part, WORLD_SIZE_OFFSET, "worldSize", worldSize, owner, " (the map belongs to another group)");
        expect(part, OWNER_OFFSET, "owner", owner, owner, " (the partition belongs to another rank)");
    }

    private static void expect(MemorySegment part, long offset, String field, int expected, int owner, String fix) {
        int found = part.get(ValueLayout.JAVA_INT, offset);
        if (found != expected) {
            throw new IllegalStateException("hash map header mismatch in rank " + owner + "'s partition: field="
                    + field + " found=" + found + " expected=" + expected + fix + "; fix: create the map on every rank"
                    + " with the same arguments, from the same symmem4j version");
        }
    }

    // ---- the GPU form: the kernel symmem_map_op of symmem4j_kernels.cu (its MAP_* #defines are these) ----

    /** Bytes of key and value a GPU map operation carries in its launch parameters ({@code MAP_INLINE_BYTES}). */
    public static final int DEVICE_INLINE_BYTES = 2048;
    /** Where the value starts in a GPU rank's result area ({@code MAP_OUT_VALUE}); result words before it. */
    public static final int DEVICE_OUT_VALUE = 64;
    /** GPU operation: copy a key's value out (seqlock read). */
    public static final int OP_GET = 1;
    /** GPU operation: insert or replace. */
    public static final int OP_PUT = 2;
    /** GPU operation: insert when absent. */
    public static final int OP_PUT_IF_ABSENT = 3;
    /** GPU operation: FULL to REMOVED by one CAS. */
    public static final int OP_REMOVE = 4;
    /** GPU operation: lock the key's slot for a host-driven compute, copying its value out. */
    public static final int OP_LOCK = 5;
    /** GPU operation: write (or not) and unlock a slot locked by {@link #OP_LOCK}. */
    public static final int OP_UNLOCK = 6;
    /** GPU operation: LOCKED by a dead holder to DEAD, by CAS. */
    public static final int OP_RETIRE = 7;
    /** Added to the state of {@link #OP_UNLOCK} to write the key and value before the unlock ({@code MAP_UNLOCK_WRITE}). */
    public static final int UNLOCK_WRITE = 256;
    /** GPU result: the key was absent (get, remove), or was absent and is now written (put, lock). */
    public static final int RESULT_ABSENT = 1;
    /** GPU result: the key was present (its value copied out for get and lock); unlock and retire done. */
    public static final int RESULT_PRESENT = 2;
    /** GPU result: a slot stayed LOCKED past the kernel's wait; result word 1 its offset, word 2 its word. */
    public static final int RESULT_BUSY = 3;
    /** GPU result: no slot for a new key. */
    public static final int RESULT_NO_SLOT = 4;

    /**
     * Bytes of key and value in a GPU operation's parameters.
     *
     * @param keyBytes   key size
     * @param valueBytes value size
     * @return the key's and the value's bytes, each padded to 8
     */
    public static int inlineBytes(int keyBytes, int valueBytes) {
        return align8(keyBytes) + align8(valueBytes);
    }

    /**
     * Refuses key and value sizes that a GPU operation cannot carry.
     *
     * @param keyBytes   key size
     * @param valueBytes value size
     * @throws IllegalArgumentException when the padded key and value exceed {@link #DEVICE_INLINE_BYTES}
     */
    public static void checkDeviceSizes(int keyBytes, int valueBytes) {
        if ((long) align8(keyBytes) + align8(valueBytes) > DEVICE_INLINE_BYTES) {
            throw new IllegalArgumentException("GPU hash map keyBytes=" + keyBytes + " valueBytes=" + valueBytes
                    + ": key and value padded to 8 bytes each come to " + ((long) align8(keyBytes) + align8(valueBytes))
                    + " bytes, expected at most " + DEVICE_INLINE_BYTES + " (they travel in the kernel's launch"
                    + " parameters; fix: store larger values elsewhere, e.g. in a DistributedTensor, and keep their"
                    + " index as the value)");
        }
    }

    /**
     * Where a GPU rank's result area starts in its own buffer: after its partition, on a line of its own.
     *
     * @param keyBytes   key size
     * @param valueBytes value size
     * @param slots      slots per rank
     * @return byte offset
     */
    public static long deviceOutOffset(int keyBytes, int valueBytes, int slots) {
        return lineUp(partitionBytes(keyBytes, valueBytes, slots));
    }

    /**
     * Bytes of a GPU rank's result area: the result words and one value.
     *
     * @param valueBytes value size
     * @return bytes
     */
    public static int deviceOutBytes(int valueBytes) {
        return DEVICE_OUT_VALUE + align8(valueBytes);
    }

    /**
     * Bytes every rank allocates for a GPU map: its partition, then its result area.
     *
     * @param keyBytes   key size
     * @param valueBytes value size
     * @param slots      slots per rank
     * @return bytes
     */
    public static long deviceTotalBytes(int keyBytes, int valueBytes, int slots) {
        return lineUp(deviceOutOffset(keyBytes, valueBytes, slots) + deviceOutBytes(valueBytes));
    }

    /**
     * Packs a GPU operation's parameters: the key, zero-padded to 8, then the value (or zeros), zero-padded.
     *
     * @param inline     at least {@link #inlineBytes} bytes
     * @param key        the key, {@code keyBytes} bytes
     * @param value      the value, {@code valueBytes} bytes, or null for none
     * @param keyBytes   key size
     * @param valueBytes value size
     */
    public static void packInline(MemorySegment inline, MemorySegment key, MemorySegment value, int keyBytes,
                                  int valueBytes) {
        inline.asSlice(0, inlineBytes(keyBytes, valueBytes)).fill((byte) 0);
        MemorySegment.copy(key, 0, inline, 0, keyBytes);
        if (value != null) {
            MemorySegment.copy(value, 0, inline, align8(keyBytes), valueBytes);
        }
    }

    private static long lineUp(long n) {
        return (n + HEADER_BYTES - 1) / HEADER_BYTES * HEADER_BYTES;
    }

    /**
     * A slot word (for the GPU form's host side and tests).
     *
     * @param state   EMPTY, FULL, REMOVED, LOCKED or DEAD
     * @param rank    the writer's rank while LOCKED, else 0
     * @param version the version
     * @return the word
     */
    public static long slotWord(int state, int rank, long version) {
        return word(state, rank, version);
    }

    // ---- the slot word ----

    /**
     * A slot word with acquire: pairs with the release that unlocked the slot; the key and value written under
     * the lock are then seen.
     *
     * @param part       the owner's buffer
     * @param slotOffset the slot's offset
     * @return the word
     */
    public static long wordAcquire(MemorySegment part, long slotOffset) {
        return (long) LONG.getAcquire(part, slotOffset);
    }

    /**
     * Locks a slot by CAS from the word seen: the linearization point of a write.
     *
     * @param part       the owner's buffer
     * @param slotOffset the slot's offset
     * @param observed   the word seen (not LOCKED)
     * @param rank       the writer
     * @return whether this writer holds the slot
     */
    public static boolean tryLock(MemorySegment part, long slotOffset, long observed, int rank) {
        return LONG.compareAndSet(part, slotOffset, observed, word(LOCKED, rank, version(observed)));
    }

    /**
     * Unlocks a slot into {@code state} with the next version.
     *
     * @param part       the owner's buffer
     * @param slotOffset the slot's offset
     * @param locked     the LOCKED word this writer set
     * @param state      FULL, REMOVED or EMPTY (a lock taken and given back)
     */
    public static void unlockRelease(MemorySegment part, long slotOffset, long locked, int state) {
        // release: publishes the key and value written under the lock to every acquire of this word
        LONG.setRelease(part, slotOffset, word(state, 0, version(locked) + 1));
    }

    /**
     * Retires a slot whose writer died holding it, by CAS so that it happens once.
     *
     * @param part       the owner's buffer
     * @param slotOffset the slot's offset
     * @param locked     the LOCKED word seen
     * @return whether this call retired it
     */
    public static boolean retire(MemorySegment part, long slotOffset, long locked) {
        return LONG.compareAndSet(part, slotOffset, locked, word(DEAD, 0, version(locked) + 1));
    }

    /**
     * A load-load fence for a seqlock reader: the key and value reads before it complete before the word is read
     * again after it.
     */
    public static void readFence() {
        VarHandle.acquireFence();
    }

    /**
     * The state of a word.
     *
     * @param word a slot word
     * @return EMPTY, FULL, REMOVED, LOCKED or DEAD
     */
    public static int state(long word) {
        return (int) (word & 7);
    }

    /**
     * The writer of a LOCKED word.
     *
     * @param word a slot word
     * @return the rank
     */
    public static int lockHolder(long word) {
        return (int) ((word >>> 3) & (MAX_RANKS - 1));
    }

    /**
     * The version of a word.
     *
     * @param word a slot word
     * @return the version
     */
    public static long version(long word) {
        return word >>> 24;
    }

    private static long word(int state, int rank, long version) {
        return (version << 24) | ((long) rank << 3) | state;
    }
}
