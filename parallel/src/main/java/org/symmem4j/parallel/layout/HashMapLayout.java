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
