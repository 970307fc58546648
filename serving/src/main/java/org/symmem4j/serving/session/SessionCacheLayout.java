package org.symmem4j.serving.session;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * The shared layout of one rank's part of a {@link SessionCache}: a header with the part's lock, a free-block
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
final class SessionCacheLayout {

    static final long MAGIC = 0x53455353494F4E31L; // "SESSION1"

    static final long H_MAGIC = 0;
    static final long H_RANK = 8;
    static final long H_BLOCK_BYTES = 12;
    static final long H_BLOCKS = 16;
    static final long H_SLOTS = 20;
    static final long H_MAX_BLOCKS = 24;
    static final long LOCK = 64;
    static final long FREE_COUNT = 72;
    static final long FREE_STACK = 128;

    /** Slot states. */
    static final int EMPTY = 0;
    static final int LIVE = 1;
    static final int EXPIRED = 2;
    static final int LOST = 3;
    static final int REMOVED = 4;

    static final long SEQ = 0;
    static final long STATE = 8;
    static final long ID_LENGTH = 12;
    static final long BYTES = 16;
    static final long LAST_USE = 24;
    static final long WRITER = 32;
    static final long BLOCK_COUNT = 36;
    static final long HASH = 40;
    static final long ID = 48;
    static final int MAX_ID_BYTES = 80;
    static final long TABLE = ID + MAX_ID_BYTES;

    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private SessionCacheLayout() {
    }

    static long align64(long v) {
        return (v + 63) & ~63L;
    }

    static long slotBytes(int maxBlocksPerSession) {
        return align64(TABLE + 4L * maxBlocksPerSession);
    }

    static long slotsOffset(int blocks) {
        return align64(FREE_STACK + 4L * blocks);
    }

    static long slotOffset(int blocks, int maxBlocks, int slot) {
        return slotsOffset(blocks) + slot * slotBytes(maxBlocks);
    }

    static long poolOffset(int blocks, int slots, int maxBlocks) {
        return slotsOffset(blocks) + slots * slotBytes(maxBlocks);
    }

    static long partBytes(int blockBytes, int blocks, int slots, int maxBlocks) {
        return poolOffset(blocks, slots, maxBlocks) + (long) blocks * blockBytes;
    }

    /** Writes a fresh part: every block free, every slot empty. */
    static void format(MemorySegment part, int rank, int blockBytes, int blocks, int slots, int maxBlocks) {
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
    static void verify(MemorySegment part, int rank, int blockBytes, int blocks, int slots, int maxBlocks) {
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
                    + maxBlocks + " (every rank must create the cache with the same settings)");
        }
    }

    // ---- the part's lock ----

    static long lockAcquire(MemorySegment part) {
        // acquire: pairs with the release in unlock; the previous holder's writes are seen after it
        return (long) LONG.getAcquire(part, LOCK);
    }

    static boolean tryLock(MemorySegment part, long expected, int rank) {
        // CAS (volatile): the linearization point of taking the part's lock
        return LONG.compareAndSet(part, LOCK, expected, rank + 1L);
    }

    static void unlock(MemorySegment part) {
        // release: publishes every write made under the lock; the next holder's lockAcquire/tryLock reads it
        LONG.setRelease(part, LOCK, 0L);
    }

    // ---- a slot's seqlock ----

    static long seqAcquire(MemorySegment part, long slot) {
        // acquire: pairs with the writer's release in endWrite; the slot's fields and blocks are seen after it
        return (long) LONG.getAcquire(part, slot + SEQ);
    }

    /** Makes the slot's sequence odd before anything of it is written. */
    static long beginWrite(MemorySegment part, long slot) {
        long odd = (long) LONG.getVolatile(part, slot + SEQ) + 1;
        // volatile store + full fence: readers see the odd sequence before any write of the slot or its blocks
        LONG.setVolatile(part, slot + SEQ, odd);
        VarHandle.fullFence();
        return odd;
    }

    static void endWrite(MemorySegment part, long slot, long odd) {
        // release: publishes the slot's fields and blocks; readers' seqAcquire/recheck read it
        LONG.setRelease(part, slot + SEQ, odd + 1);
    }

    /** A reader's second read of the sequence: its field and block reads complete before it. */
    static long seqRecheck(MemorySegment part, long slot) {
        VarHandle.loadLoadFence(); // the copies above complete before the sequence is read again
        return (long) LONG.getAcquire(part, slot + SEQ);
    }
}
