package org.symmem4j.parallel.layout;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * The shared layout of one rank's part of the serving module's {@code SessionCache}: a header with the part's lock, a free-block
 * stack, session slots (each with its seqlock word and block table) and the block pool. Every rank's part has the
 * same layout; a session lives in its home rank's part ({@code hash(id) % worldSize}) and any rank reads and
 * writes it there.
 *
 * <pre>
 * offset                       field                      written by                read by
 * 0     header (64 B)          magic, rank, geometry      owner at creation          every rank (verify)
 * 64    lock line (64 B)       LOCK: 0 free, rank+1 held  any writer (CAS)           writers
 *                              FREE_COUNT, CLOCK          the lock holder            the lock holder
 * 128   free stack             int[blocks]                the lock holder            the lock holder
 * S     session slot i         SEQ (even stable, odd      the lock holder            readers (seqlock)
 *       (slotBytes each)         while written), STATE,     (release on SEQ)
 *                                BYTES, LAST_USE, WRITER,
 *                                BLOCKS, HASH, ID, TABLE
 * B     block pool             blocks x blockBytes        the lock holder            readers, between two SEQ reads
 * </pre>
 *
 * Slots and the pool start on 64-byte boundaries. A slot's {@code LAST_USE} is written by readers too (a benign
 * race: a lost update only makes the LRU order approximate).
 */
public final class SessionCacheLayout {

    /** Written last at format time ("SESSION1"); a part without it was never formatted. */
    public static final long MAGIC = 0x53455353494F4E31L; // "SESSION1"

    /** Header: offset of the magic (long). */
    public static final long H_MAGIC = 0;
    /** Header: offset of the owning rank (int). */
    public static final long H_RANK = 8;
    /** Header: offset of the bytes per block (int). */
    public static final long H_BLOCK_BYTES = 12;
    /** Header: offset of the block count (int). */
    public static final long H_BLOCKS = 16;
    /** Header: offset of the session slot count (int). */
    public static final long H_SLOTS = 20;
    /** Header: offset of the most blocks one session may hold (int). */
    public static final long H_MAX_BLOCKS = 24;
    /** Offset of the part's lock word (long): 0 free, holder's rank + 1 held. */
    public static final long LOCK = 64;
    /** Offset of the free-block count (int), written under the lock. */
    public static final long FREE_COUNT = 72;
    /** Offset of the free-block stack (int per block), written under the lock. */
    public static final long FREE_STACK = 128;

    /** Slot states. */
    /** Slot state: never used or reused. */
    public static final int EMPTY = 0;
    /** Slot state: holds a readable session. */
    public static final int LIVE = 1;
    /** Slot state: evicted to free blocks; readers get "expired". */
    public static final int EXPIRED = 2;
    /** Slot state: its writer died mid-write; never readable. */
    public static final int LOST = 3;
    /** Slot state: removed by its owner. */
    public static final int REMOVED = 4;

    /** Slot field: the seqlock word (long): even when stable, odd while written. */
    public static final long SEQ = 0;
    /** Slot field: one of the slot states (int). */
    public static final long STATE = 8;
    /** Slot field: bytes of the session id (int). */
    public static final long ID_LENGTH = 12;
    /** Slot field: bytes of the session's state (long). */
    public static final long BYTES = 16;
    /** Slot field: the part's clock at the last use, for LRU eviction (long). */
    public static final long LAST_USE = 24;
    /** Slot field: rank + 1 of the writer while the sequence is odd (int). */
    public static final long WRITER = 32;
    /** Slot field: blocks the session holds (int). */
    public static final long BLOCK_COUNT = 36;
    /** Slot field: the session id's hash (long). */
    public static final long HASH = 40;
    /** Slot field: the session id's UTF-8 bytes, at most {@link #MAX_ID_BYTES}. */
    public static final long ID = 48;
    /** Longest session id, in UTF-8 bytes. */
    public static final int MAX_ID_BYTES = 80;
    /** Slot field: the block table (an int per block the session holds). */
    public static final long TABLE = ID + MAX_ID_BYTES;

    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private SessionCacheLayout() {
    }

    /** {@code v} rounded up to a multiple of 64. */
    public static long align64(long v) {
        return (v + 63) & ~63L;
    }

    /** Bytes of one session slot for sessions of at most {@code maxBlocksPerSession} blocks, 64-byte aligned. */
    public static long slotBytes(int maxBlocksPerSession) {
        return align64(TABLE + 4L * maxBlocksPerSession);
    }

    /** Offset of slot 0 in a part of {@code blocks} blocks. */
    public static long slotsOffset(int blocks) {
        return align64(FREE_STACK + 4L * blocks);
    }

    /** Offset of slot {@code slot}. */
    public static long slotOffset(int blocks, int maxBlocks, int slot) {
        return slotsOffset(blocks) + slot * slotBytes(maxBlocks);
    }

    /** Offset of the block pool, after the slots. */
    public static long poolOffset(int blocks, int slots, int maxBlocks) {
        return slotsOffset(blocks) + slots * slotBytes(maxBlocks);
    }

    /** Bytes of one rank's part with this geometry. */
    public static long partBytes(int blockBytes, int blocks, int slots, int maxBlocks) {
        return poolOffset(blocks, slots, maxBlocks) + (long) blocks * blockBytes;
    }

    /** Writes a fresh part: every block free, every slot empty. */
    public static void format(MemorySegment part, int rank, int blockBytes, int blocks, int slots, int maxBlocks) {
        part.asSlice(0, poolOffset(blocks, slots, maxBlocks)).fill((byte) 0);
        part.set(ValueLayout.JAVA_INT, H_RANK, rank);
        part.set(ValueLayout.JAVA_INT, H_BLOCK_BYTES, blockBytes);
        part.set(ValueLayout.JAVA_INT, H_BLOCKS, blocks);
        part.set(ValueLayout.JAVA_INT, H_SLOTS, slots);
        part.set(ValueLayout.JAVA_INT, H_MAX_BLOCKS, maxBlocks);
        for (int b = 0; b < blocks; b++) {
            part.set(ValueLayout.JAVA_INT, FREE_STACK + 4L * b, blocks - 1 - b);
        }
        part.set(ValueLayout.JAVA_INT, FREE_COUNT, blocks);
        // release: the geometry and free stack above are published with the magic; verify reads it after the barrier
        LONG.setRelease(part, H_MAGIC, MAGIC);
    }

    /** Checks that a peer's part was formatted with the same geometry, for that rank. */
    public static void verify(MemorySegment part, int rank, int blockBytes, int blocks, int slots, int maxBlocks) {
        long magic = (long) LONG.getAcquire(part, H_MAGIC);
        int r = part.get(ValueLayout.JAVA_INT, H_RANK);
        int bb = part.get(ValueLayout.JAVA_INT, H_BLOCK_BYTES);
        int n = part.get(ValueLayout.JAVA_INT, H_BLOCKS);
        int s = part.get(ValueLayout.JAVA_INT, H_SLOTS);
        int m = part.get(ValueLayout.JAVA_INT, H_MAX_BLOCKS);
        if (magic != MAGIC || r != rank || bb != blockBytes || n != blocks || s != slots || m != maxBlocks) {
            throw new IllegalStateException("session cache part of rank=" + rank + " found magic=0x"
                    + Long.toHexString(magic) + " rank=" + r + " blockBytes=" + bb + " blocks=" + n + " slots=" + s
                    + " maxBlocksPerSession=" + m + ", expected magic=0x" + Long.toHexString(MAGIC) + " rank=" + rank
                    + " blockBytes=" + blockBytes + " blocks=" + blocks + " slots=" + slots + " maxBlocksPerSession="
                    + maxBlocks + " (every rank must create the cache with the same settings; fix: pass the same"
                    + " blockBytes, blocks, slots and maxBlocksPerSession on every rank, from the same symmem4j version)");
        }
    }

    // ---- the part's lock ----

    /** The part's lock word, read with acquire. */
    public static long lockAcquire(MemorySegment part) {
        // acquire: pairs with the release in unlock; the previous holder's writes are seen after it
        return (long) LONG.getAcquire(part, LOCK);
    }

    /** Takes the part's lock for {@code rank} if it still holds {@code expected}. */
    public static boolean tryLock(MemorySegment part, long expected, int rank) {
        // CAS (volatile): the linearization point of taking the part's lock
        return LONG.compareAndSet(part, LOCK, expected, rank + 1L);
    }

    /** Gives the part's lock back. */
    public static void unlock(MemorySegment part) {
        // release: publishes every write made under the lock; the next holder's lockAcquire/tryLock reads it
        LONG.setRelease(part, LOCK, 0L);
    }

    // ---- a slot's seqlock ----

    /** A reader's first read of a slot's sequence. */
    public static long seqAcquire(MemorySegment part, long slot) {
        // acquire: pairs with the writer's release in endWrite; the slot's fields and blocks are seen after it
        return (long) LONG.getAcquire(part, slot + SEQ);
    }

    /** Makes the slot's sequence odd before anything of it is written. */
    public static long beginWrite(MemorySegment part, long slot) {
        long odd = (long) LONG.getVolatile(part, slot + SEQ) + 1;
        // volatile store + full fence: readers see the odd sequence before any write of the slot or its blocks
        LONG.setVolatile(part, slot + SEQ, odd);
        VarHandle.fullFence();
        return odd;
    }

    /** Makes the slot's sequence even again after its writes. */
    public static void endWrite(MemorySegment part, long slot, long odd) {
        // release: publishes the slot's fields and blocks; readers' seqAcquire/recheck read it
        LONG.setRelease(part, slot + SEQ, odd + 1);
    }

    /** A reader's second read of the sequence: its field and block reads complete before it. */
    public static long seqRecheck(MemorySegment part, long slot) {
        VarHandle.loadLoadFence(); // the copies above complete before the sequence is read again
        return (long) LONG.getAcquire(part, slot + SEQ);
    }
}
