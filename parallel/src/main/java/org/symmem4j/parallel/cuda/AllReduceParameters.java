package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The {@code void** kernelParams} arrays of the all-reduce kernels, built once per communicator and
 * reused by every launch of the rank's thread (no allocation per call): each parameter's value in a
 * native slot of its own, and for each kernel family an array of pointers to its slots, in the
 * order of the kernel's parameter list ({@link Kernel}). A launch writes the slots it uses, then
 * enqueues the array; the driver copies the values at launch.
 *
 * <pre>
 *   symmem_one_shot_* / _ll_*:   (buf, Peers scratch, Pads pads, count, rank, world, divisor, slotBytes)
 *   symmem_two_shot_*:           (Peers bufs, Pads pads, count, rank, world, divisor)
 *   symmem_two_shot_push_*:      (Peers bufs, Peers scratch, Pads pads, count, rank, world, divisor, slotBytes)
 * </pre>
 * {@code Peers} and {@code Pads} are structs of {@link CudaKernels#MAX_RANKS} 64-bit pointers.
 */
final class AllReduceParameters {

    private final int worldSize;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment peersSlot;
    private final MemorySegment padsSlot;
    private final MemorySegment countSlot;
    private final MemorySegment rankSlot;
    private final MemorySegment worldSlot;
    private final MemorySegment divisorSlot;
    private final MemorySegment bufSlot;
    private final MemorySegment slotBytesSlot;
    private final MemorySegment scratchSlot;
    private final MemorySegment twoShotParams;
    private final MemorySegment twoShotPushParams;
    private final MemorySegment oneShotParams;

    AllReduceParameters(int rank, int worldSize) {
        this.worldSize = worldSize;
        peersSlot = arena.allocate(8L * CudaKernels.MAX_RANKS, 16);
        padsSlot = arena.allocate(8L * CudaKernels.MAX_RANKS, 16);
        countSlot = arena.allocate(8, 8);
        rankSlot = arena.allocate(4, 4);
        worldSlot = arena.allocate(4, 4);
        divisorSlot = arena.allocate(4, 4);
        bufSlot = arena.allocate(8, 8);
        slotBytesSlot = arena.allocate(8, 8);
        scratchSlot = arena.allocate(8L * CudaKernels.MAX_RANKS, 16);
        // parameter order of symmem_two_shot_*: (Peers bufs, Pads pads, count, rank, world, divisor)
        twoShotParams = paramArray(peersSlot, padsSlot, countSlot, rankSlot, worldSlot, divisorSlot);
        // symmem_two_shot_push_*: (Peers bufs, Peers scratch, Pads pads, count, rank, world, divisor, slotBytes)
        twoShotPushParams = paramArray(peersSlot, scratchSlot, padsSlot, countSlot, rankSlot, worldSlot, divisorSlot, slotBytesSlot);
        // symmem_one_shot_*: (buf, Peers scratch, Pads pads, count, rank, world, divisor, slotBytes)
        oneShotParams = paramArray(bufSlot, peersSlot, padsSlot, countSlot, rankSlot, worldSlot, divisorSlot, slotBytesSlot);
        rankSlot.set(ValueLayout.JAVA_INT, 0, rank);
        worldSlot.set(ValueLayout.JAVA_INT, 0, worldSize);
    }

    private MemorySegment paramArray(MemorySegment... slots) {
        MemorySegment a = arena.allocate(ValueLayout.ADDRESS, slots.length);
        for (int i = 0; i < slots.length; i++) {
            a.setAtIndex(ValueLayout.ADDRESS, i, slots[i]);
        }
        return a;
    }

    /** Writes the parameters every all-reduce kernel takes: the element count and the divisor (0: no division). */
    void call(long count, int divisor) {
        countSlot.set(ValueLayout.JAVA_LONG, 0, count);
        divisorSlot.set(ValueLayout.JAVA_INT, 0, divisor);
    }

    /**
     * {@return the parameters of a ONE_SHOT kernel (SIMPLE or LL: the same list)}
     *
     * @param scratch  every rank's landing slots (the SIMPLE scratch, or the LL words)
     * @param pads     every rank's signal pad of that scratch
     * @param buf      this rank's buffer
     * @param slotSize a landing slot's size: bytes for SIMPLE, 8-byte words for LL
     */
    MemorySegment oneShot(long[] scratch, long[] pads, long buf, long slotSize) {
        setPointers(peersSlot, scratch, 0);
        setPointers(padsSlot, pads, 0);
        bufSlot.set(ValueLayout.JAVA_LONG, 0, buf);
        slotBytesSlot.set(ValueLayout.JAVA_LONG, 0, slotSize);
        return oneShotParams;
    }

    /**
     * {@return the parameters of the write-only TWO_SHOT kernel (PUSH)}
     *
     * @param bufs      every rank's buffer base
     * @param offset    the message's byte offset in every buffer
     * @param scratch   every rank's landing scratch
     * @param pads      every rank's signal pad of the buffers
     * @param slotBytes one landing slot's size in the scratch
     */
    MemorySegment twoShotPush(long[] bufs, long offset, long[] scratch, long[] pads, long slotBytes) {
        setPointers(peersSlot, bufs, offset);
        setPointers(scratchSlot, scratch, 0);
        setPointers(padsSlot, pads, 0);
        slotBytesSlot.set(ValueLayout.JAVA_LONG, 0, slotBytes);
        return twoShotPushParams;
    }

    /**
     * {@return the parameters of the pulling TWO_SHOT kernel (SIMPLE)}
     *
     * @param bufs   every rank's buffer base
     * @param offset the message's byte offset in every buffer
     * @param pads   every rank's signal pad of the buffers
     */
    MemorySegment twoShot(long[] bufs, long offset, long[] pads) {
        setPointers(peersSlot, bufs, offset);
        setPointers(padsSlot, pads, 0);
        return twoShotParams;
    }

    /** Writes the ranks' pointers (plus {@code offset}) into a kernel's 8-pointer struct slot; unused entries 0. */
    private void setPointers(MemorySegment slot, long[] pointers, long offset) {
        for (int p = 0; p < CudaKernels.MAX_RANKS; p++) {
            slot.setAtIndex(ValueLayout.JAVA_LONG, p, p < worldSize ? pointers[p] + offset : 0);
        }
    }

    /** Frees the slots; no launch may follow. */
    void close() {
        arena.close();
    }
}
