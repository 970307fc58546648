package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;

/**
 * Symmetric memory on GPUs: each rank's buffer and signal pad in its device's memory, every peer's
 * reachable through peer access. {@link #local()} and {@link #peer(int)} are device addresses as
 * zero-length segments: pass them to collectives, never dereference them on the host (use
 * {@link #copyFromHost} and {@link #copyToHost}).
 *
 * <p>Signals are stream-ordered on this rank's stream: {@link #putWithSignal} is one kernel that
 * copies and then signals with release at system scope; {@link #waitSignal} enqueues a kernel that
 * waits with acquire, and returns once it has run.
 */
public final class CudaSymmetricMemory implements SymmetricMemory, org.symmem4j.parallel.DeviceMemory {

    private final Group group;
    private final CudaTransport transport;
    private final CudaRank rank;
    private final long id;
    private final long byteSize;
    private final long[] data;
    private final long[] pads;
    private final boolean ownsData;
    private boolean closed;

    CudaSymmetricMemory(Group group, CudaTransport transport, CudaRank rank, long id, long byteSize, long[] data,
                        long[] pads, boolean ownsData) {
        this.group = group;
        this.transport = transport;
        this.rank = rank;
        this.id = id;
        this.byteSize = byteSize;
        this.data = data;
        this.pads = pads;
        this.ownsData = ownsData;
    }

    @Override
    public Group group() {
        return group;
    }

    @Override
    public long byteSize() {
        return byteSize;
    }

    @Override
    public long id() {
        return id;
    }

    @Override
    public MemorySegment local() {
        return MemorySegment.ofAddress(data[group.rank()]);
    }

    @Override
    public MemorySegment peer(int peer) {
        Objects.checkIndex(peer, data.length);
        return MemorySegment.ofAddress(data[peer]);
    }

    @Override
    public long bufferPointer(int rank) {
        Objects.checkIndex(rank, data.length);
        return data[rank];
    }

    @Override
    public long signalPadPointer(int rank) {
        Objects.checkIndex(rank, pads.length);
        return pads[rank];
    }

    long dataPointer(int peer) {
        return data[peer];
    }

    long padPointer(int peer) {
        return pads[peer];
    }

    long[] dataPointers() {
        return data;
    }

    long[] padPointers() {
        return pads;
    }

    CudaRank cudaRank() {
        return rank;
    }

    CudaTransport transport() {
        return transport;
    }

    /**
     * Copies {@code src} (host memory) into this rank's buffer at {@code offset}; synchronous.
     *
     * @param src host bytes, all of which are copied
     * @param offset byte offset in this rank's buffer
     * @throws IndexOutOfBoundsException if the range falls outside this rank's buffer
     */
    @Override
    public void copyFromHost(MemorySegment src, long offset) {
        checkRange(offset, src.byteSize());
        transport.driver().setCurrent(rank.context);
        transport.driver().copyHostToDevice(data[group.rank()] + offset, src, src.byteSize());
    }

    /**
     * Copies {@code dst.byteSize()} bytes of this rank's buffer at {@code offset} into host memory; waits for this rank's stream first.
     *
     * @param offset byte offset in this rank's buffer
     * @param dst destination host memory
     * @throws IndexOutOfBoundsException if the range falls outside this rank's buffer
     */
    @Override
    public void copyToHost(long offset, MemorySegment dst) {
        checkRange(offset, dst.byteSize());
        transport.driver().setCurrent(rank.context);
        transport.driver().synchronize(rank.stream);
        transport.driver().copyDeviceToHost(dst, data[group.rank()] + offset, dst.byteSize());
    }

    /**
     * Fills this rank's buffer with a byte (for poisoning outputs in tests); synchronous.
     *
     * @param value the byte every byte of the buffer is set to
     */
    public void fill(byte value) {
        transport.driver().setCurrent(rank.context);
        transport.driver().synchronize(rank.stream);
        transport.driver().memset(data[group.rank()], value, byteSize);
    }

    private void checkRange(long offset, long bytes) {
        if (offset < 0 || bytes < 0 || offset > byteSize - bytes) {
            throw new IndexOutOfBoundsException("range offset=" + offset + " bytes=" + bytes + " outside symmetric memory of "
                    + byteSize + " bytes");
        }
    }

    @Override
    public boolean hostAddressable() {
        return false;
    }

    @Override
    public int signalSlots() {
        return CudaKernels.SIGNAL_SLOTS;
    }

    @Override
    public void barrier() {
        transport.driver().setCurrent(rank.context);
        transport.driver().synchronize(rank.stream);
        group.allGatherBytes("cuda-symmetric-memory-barrier", new byte[0]);
    }

    /**
     * Enqueues on this rank's stream: copy {@code src} — a device address of this rank, as a segment
     * whose byte size is the length — into {@code peer}'s buffer at {@code dstOffset}, then signal.
     */
    @Override
    public void putWithSignal(int peer, MemorySegment src, long dstOffset, int slot, long value, SignalOp op) {
        Objects.checkIndex(peer, data.length);
        checkSlot(slot);
        if (dstOffset < 0 || dstOffset > byteSize - src.byteSize()) {
            throw new IndexOutOfBoundsException("put of " + src.byteSize() + " bytes at dstOffset=" + dstOffset
                    + " outside symmetric memory of " + byteSize + " bytes");
        }
        launchPut(data[peer] + dstOffset, src.address(), src.byteSize(), pads[peer] + signalOffset(slot), value, op);
    }

    @Override
    public void signal(int peer, int slot, long value, SignalOp op) {
        Objects.checkIndex(peer, data.length);
        checkSlot(slot);
        launchPut(0, 0, 0, pads[peer] + signalOffset(slot), value, op);
    }

    private void launchPut(long dst, long src, long bytes, long signal, long value, SignalOp op) {
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        // 64 KiB per block, at most one block per SM, fewer where ranks share the GPU (LaunchBudget):
        // the put waits for nobody, but it must find room next to the peers' kernels that wait for it
        int blocks = rank.ownGrid(Kernel.PUT_SIGNAL, (bytes + 65535) / 65536);
        try (Arena a = Arena.ofConfined()) {
            CudaLaunch params = new CudaLaunch(a)
                    .pointer(dst).pointer(src).size(bytes).pointer(pads[group.rank()] + CudaKernels.DONE_COUNTER_OFFSET)
                    .pointer(signal).size(value).integer(op == SignalOp.ADD ? 1 : 0);
            rank.launch(d, Kernel.PUT_SIGNAL, blocks, params.array());
        }
    }

    /** Enqueues a wait on this rank's stream and returns once the slot holds at least {@code atLeast}. */
    @Override
    public long waitSignal(int slot, long atLeast, int fromRank) {
        enqueueWaitSignal(slot, atLeast, false);
        transport.driver().synchronize(rank.stream);
        return readSignal(slot);
    }

    /**
     * Enqueues on this rank's stream a wait until signal slot {@code slot} holds at least
     * {@code atLeast} (acquire: the stream's later work sees the data put before the signal), and
     * returns at once. With {@code consume} the wait then subtracts {@code atLeast}, so the slot
     * counts like a semaphore and a captured graph of puts and waits replays with the same
     * thresholds. Unbounded on the device: pair every wait with a put that will come.
     *
     * @param slot the signal slot of this rank's pad
     * @param atLeast the value to wait for
     * @param consume whether to subtract {@code atLeast} once reached
     */
    @Override
    public void enqueueWaitSignal(int slot, long atLeast, boolean consume) {
        checkSlot(slot);
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        try (Arena a = Arena.ofConfined()) {
            CudaLaunch params = new CudaLaunch(a).pointer(pads[group.rank()] + signalOffset(slot)).size(atLeast);
            rank.launch(d, consume ? Kernel.WAIT_SIGNAL_CONSUME : Kernel.WAIT_SIGNAL, 1, params.array());
        }
    }

    /**
     * Stores {@code value} into signal slot {@code slot} of {@code peer}'s pad from the host, at once:
     * not ordered with any stream. For aborts only: a device-side wait that will never be satisfied
     * (its peer failed) returns once a slot it waits on holds at least the awaited value, and a
     * store of a large value makes that happen while this rank's own stream may itself be blocked.
     * A concurrent device-side atomic add is applied before or after the store, never lost into it.
     *
     * @param peer the rank whose pad is written
     * @param slot the signal slot
     * @param value the value stored
     */
    public void storeSignalFromHost(int peer, int slot, long value) {
        Objects.checkIndex(peer, data.length);
        checkSlot(slot);
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(8);
            v.set(ValueLayout.JAVA_LONG, 0, value);
            d.copyHostToDevice(pads[peer] + signalOffset(slot), v, 8);
        }
    }

    /**
     * Enqueues on this rank's stream a copy between device addresses of this rank (or peers').
     *
     * @param dstDevice destination device address
     * @param srcDevice source device address
     * @param bytes bytes to copy
     */
    public void enqueueCopy(long dstDevice, long srcDevice, long bytes) {
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        d.copyDeviceToDeviceAsync(dstDevice, srcDevice, bytes, rank.stream);
    }

    /**
     * Creates an event in this rank's context (destroy it with {@code CudaDriver.destroyEvent}); not a stream operation.
     *
     * @return the CUevent
     */
    public MemorySegment createEvent() {
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        return d.createEvent();
    }

    /**
     * Records {@code event} (from {@link #createEvent}) on this rank's stream: a stream operation, no driver allocation.
     *
     * @param event the CUevent to record
     */
    public void recordEvent(MemorySegment event) {
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        d.record(event, rank.stream);
    }

    /**
     * Waits until everything enqueued on this rank's stream has completed, or {@code timeout} has
     * passed; returns whether it completed. Unlike a stream synchronize it gives up, so a stream
     * blocked on a device-side wait whose peer died cannot hold the caller forever.
     *
     * @param timeout how long to wait at most
     * @return true if the stream completed, false on timeout
     */
    public boolean awaitStream(java.time.Duration timeout) {
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        long deadline = System.nanoTime() + timeout.toNanos();
        int polls = 0;
        while (!d.streamIdle(rank.stream)) {
            if (System.nanoTime() - deadline > 0) {
                return false;
            }
            if (++polls < 1_000) {
                Thread.onSpinWait();
            } else {
                java.util.concurrent.locks.LockSupport.parkNanos(50_000);
            }
        }
        return true;
    }

    @Override
    public long readSignal(int slot) {
        checkSlot(slot);
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(8);
            d.copyDeviceToHost(v, pads[group.rank()] + signalOffset(slot), 8);
            return v.get(ValueLayout.JAVA_LONG, 0);
        }
    }

    private static long signalOffset(int slot) {
        return CudaKernels.SIGNALS_OFFSET + (long) slot * Long.BYTES;
    }

    private void checkSlot(int slot) {
        if (slot < 0 || slot >= CudaKernels.SIGNAL_SLOTS) {
            throw new IndexOutOfBoundsException("signal slot=" + slot + " outside [0, " + CudaKernels.SIGNAL_SLOTS + ")");
        }
    }

    /** Collective: waits for every rank, then frees this rank's buffer and pad. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            barrier();
        } finally {
            CudaDriver d = transport.driver();
            d.setCurrent(rank.context);
            d.free(pads[group.rank()]);
            if (ownsData) {
                d.free(data[group.rank()]);
            }
        }
    }
}
