package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.locks.LockSupport;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.WorkClock;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;
import org.symmem4j.parallel.cuda.ffi.Nvshmem;
import org.symmem4j.parallel.layout.DeviceRingLayout;
import org.symmem4j.parallel.layout.HashMapLayout;
import org.symmem4j.parallel.layout.RingBufferLayout;

/**
 * Symmetric memory on GPUs: each rank's buffer and signal pad in its device's memory, every peer's
 * reachable through peer access. {@link #local()} and {@link #peer(int)} are device addresses as
 * zero-length segments: pass them to collectives, never dereference them on the host (use
 * {@link #copyFromHost} and {@link #copyToHost}).
 *
 * <p>Signals are stream-ordered on this rank's stream ({@link #enqueued()}): {@link #putWithSignal} is
 * one kernel that copies and then signals with release at system scope; {@link #orderAfterSignal}
 * enqueues a kernel that waits with acquire; {@link #waitSignal} enqueues it and returns once it has
 * run. {@link #storeSignalsNow} bypasses the rank's stream (aborts), {@link #awaitWork} waits for
 * it with a bound, and {@link #clock} times it with events.
 */
public final class CudaSymmetricMemory implements SymmetricMemory, org.symmem4j.parallel.DeviceMemory,
        org.symmem4j.parallel.DeviceRings, org.symmem4j.parallel.DeviceMaps {

    private static final Logger LOG = LoggerFactory.getLogger(CudaSymmetricMemory.class);
    /** Longer waits of {@link #enqueueAppend} are forever (the GPU clock's nanoseconds, unsigned, never overflow). */
    private static final Duration MAX_APPEND_WAIT = Duration.ofDays(365);

    private final Group group;
    private final CudaTransport transport;
    private final CudaRank rank;
    private final long id;
    private final long byteSize;
    private final long[] data;
    private final long[] pads;
    /** Every rank's buffer and pad, freed by the last rank to close ({@link #close()}). */
    private final SymmetricAllocation allocation;
    /** For {@link #storeSignalsNow}: a non-blocking stream of its own, and page-locked values it copies from. */
    private final MemorySegment sideStream;
    private final MemorySegment storeStaging;
    private boolean closed;
    /** Device address of the buffer and pad pointer tables (worldSize + worldSize words), 0 until first asked for. */
    private long pointerTables;
    /**
     * Null where puts, signals and stream-side waits are our kernels; NVSHMEM where the buffers and pads are
     * on its symmetric heap ({@link NvshmemTransport}): they are then NVSHMEM's on-stream calls, which also
     * reach PEs of other nodes (this rank's PE is its group rank).
     */
    private final Nvshmem nvshmem;
    /**
     * On NVSHMEM's heap: whether the stream-side waits are NVSHMEM's ({@code nvshmemx_signal_wait_until_on_stream},
     * the default) or our wait kernel polling this rank's own pad ({@code -Dsymmem4j.nvshmem.wait=kernel}; NVSHMEM
     * stores the signal after the data, so an acquire load that sees it sees the data, as with our puts).
     */
    private final boolean nvshmemWait;

    CudaSymmetricMemory(Group group, CudaTransport transport, CudaRank rank, long byteSize, long[] data,
                        long[] pads, SymmetricAllocation allocation) {
        this(group, transport, rank, byteSize, data, pads, allocation, null);
    }

    /**
     * As above; with {@code nvshmem} non-null the memory is on NVSHMEM's symmetric heap ({@code data[rank]} and
     * {@code pads[rank]} this PE's symmetric addresses, a peer's entries 0 where NVSHMEM gives no peer pointer).
     */
    CudaSymmetricMemory(Group group, CudaTransport transport, CudaRank rank, long byteSize, long[] data,
                        long[] pads, SymmetricAllocation allocation, Nvshmem nvshmem) {
        this.nvshmem = nvshmem;
        this.nvshmemWait = nvshmem != null && !"kernel".equals(Configuration.NVSHMEM_WAIT.get());
        this.group = group;
        this.transport = transport;
        this.rank = rank;
        this.id = allocation.id();
        this.byteSize = byteSize;
        this.data = data;
        this.pads = pads;
        this.allocation = allocation;
        // created here, with the allocation, not at an abort: a driver call that creates objects can
        // wait for the shared context while a peer's kernel spins in a device-side wait
        transport.driver().setCurrent(rank.context);
        MemorySegment stream = null;
        try {
            stream = transport.driver().createStream(CudaDriver.STREAM_NON_BLOCKING);
            this.storeStaging = transport.driver().allocateHost((long) CudaKernels.SIGNAL_SLOTS * Long.BYTES);
        } catch (RuntimeException e) {
            if (stream != null) {
                transport.driver().destroyStream(stream);
            }
            // nothing of this handle ran: its share is given back at once (the peers' closes free the memory)
            transport.giveBack(allocation, group.rank(), 0, null, rank.context);
            throw e;
        }
        this.sideStream = stream;
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
        // sized as SymmetricMemory.local documents (a device address: never dereferenced on the host)
        return MemorySegment.ofAddress(data[group.rank()]).reinterpret(byteSize);
    }

    @Override
    public MemorySegment peer(int peer) {
        return MemorySegment.ofAddress(peerData(peer)).reinterpret(byteSize);
    }

    @Override
    public long bufferPointer(int rank) {
        return peerData(rank);
    }

    @Override
    public long signalPadPointer(int rank) {
        return peerPad(rank);
    }

    /** Rank {@code peer}'s buffer as this GPU maps it; refused where NVSHMEM reaches it only through its calls. */
    private long peerData(int peer) {
        Objects.checkIndex(peer, data.length);
        if (data[peer] == 0) {
            throw unreachable(peer);
        }
        return data[peer];
    }

    private long peerPad(int peer) {
        Objects.checkIndex(peer, pads.length);
        if (pads[peer] == 0) {
            throw unreachable(peer);
        }
        return pads[peer];
    }

    private UnsupportedOperationException unreachable(int peer) {
        return new UnsupportedOperationException("rank=" + peer + "'s memory is not mapped on rank=" + group.rank()
                + "'s GPU (NVSHMEM gives no peer pointer: another node, or no peer access); fix: reach it with putWithSignal and"
                + " signal, which NVSHMEM carries, or run the ranks on one machine for our kernels and peer()");
    }

    /** Whether every rank's buffer and pad is mapped on this rank's GPU (our kernels need it; NVSHMEM's calls do not). */
    boolean everyPeerMapped() {
        for (int p = 0; p < data.length; p++) {
            if (data[p] == 0 || pads[p] == 0) {
                return false;
            }
        }
        return true;
    }

    /** Whether this memory is on NVSHMEM's symmetric heap (NVSHMEM's reductions may run on it). */
    boolean onNvshmemHeap() {
        return nvshmem != null;
    }

    /**
     * {@inheritDoc}
     *
     * <p>The first call of either table allocates both (2 x worldSize x 8 bytes of this rank's GPU)
     * and copies the pointers in, synchronously, so it must come before a graph capture that uses
     * them (inside one it throws {@link IllegalStateException}); {@link #close()} frees them.
     */
    @Override
    public long bufferPointerTable() {
        return pointerTables();
    }

    @Override
    public long signalPadPointerTable() {
        return pointerTables() + (long) data.length * Long.BYTES;
    }

    /** Whether this rank closed this memory (a collective on it is refused: {@code Problem.FREED_BUFFER}). */
    boolean isClosed() {
        return closed;
    }

    private synchronized long pointerTables() {
        if (closed) {
            throw new IllegalStateException("symmetric memory id=" + id + " is closed (its pointer tables were freed;"
                    + " fix: use the memory before close(), or allocate a new one)");
        }
        if (pointerTables == 0) {
            if (rank.capturing) {
                throw new IllegalStateException("the pointer tables of symmetric memory id=" + id + " are made at the first"
                        + " call, which copies from the host and cannot be captured; fix: call bufferPointerTable() or"
                        + " signalPadPointerTable() once before DeviceCommunicator.capture");
            }
            CudaDriver d = transport.driver();
            rank.makeCurrent("make device pointer tables");
            int n = data.length;
            long table = d.malloc(2L * n * Long.BYTES);
            try (Arena a = Arena.ofConfined()) {
                MemorySegment host = a.allocate(2L * n * Long.BYTES, 8);
                for (int p = 0; p < n; p++) {
                    host.setAtIndex(ValueLayout.JAVA_LONG, p, data[p]);
                    host.setAtIndex(ValueLayout.JAVA_LONG, n + p, pads[p]);
                }
                d.copyHostToDevice(table, host, host.byteSize());
            } catch (RuntimeException e) {
                d.free(table);
                throw e;
            }
            pointerTables = table;
        }
        return pointerTables;
    }

    @Override
    public long signalPadBytes() {
        return CudaKernels.PAD_BYTES;
    }

    @Override
    public long userPadOffset() {
        return CudaKernels.USER_PAD_OFFSET;
    }

    @Override
    public long userPadBytes() {
        return CudaKernels.USER_PAD_BYTES;
    }

    @Override
    public long signalSlotOffset(int slot) {
        checkSlot(slot);
        return signalOffset(slot);
    }

    long dataPointer(int peer) {
        return data[peer];
    }

    long[] dataPointers() {
        return data;
    }

    long[] padPointers() {
        return pads;
    }

    SymmetricAllocation allocation() {
        return allocation;
    }

    CudaRank cudaRank() {
        return rank;
    }

    CudaTransport transport() {
        return transport;
    }

    /**
     * Copies {@code src} (host memory) into this rank's buffer at {@code offset}; returns once the bytes are in
     * device memory, from pageable host memory too ({@link CudaDriver#copyHostToDevice} waits for the staged DMA).
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

    @Override
    public void enqueueAppend(int consumer, int capacity, boolean manyToOne, int type, MemorySegment src, Duration wait) {
        if (type < 1 || src.byteSize() > RingBufferLayout.maxPayload(capacity)) {
            throw new IllegalArgumentException("ring append: type=" + type + " payload bytes=" + src.byteSize()
                    + " expected type >= 1 and at most " + RingBufferLayout.maxPayload(capacity) + " bytes (an eighth of"
                    + " capacity=" + capacity + " less the 8-byte header; fix: a larger ring, or split the message)");
        }
        checkRange(0, DeviceRingLayout.totalBytes(capacity));
        long ring = peerData(consumer);
        long status = data[group.rank()] + DeviceRingLayout.statusOffset(capacity);
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        try (Arena a = Arena.ofConfined()) {
            CudaLaunch params = new CudaLaunch(a).pointer(ring).pointer(src.address()).integer((int) src.byteSize())
                    .integer(type).integer(capacity).integer(manyToOne ? 1 : 0)
                    .size(wait.isNegative() ? 0 : wait.compareTo(MAX_APPEND_WAIT) > 0 ? Long.MAX_VALUE : wait.toNanos())
                    .pointer(status);
            rank.launch(d, Kernel.RING_PUT, 1, params.array());
        }
    }

    @Override
    public void runMapOperation(Operation operation, MemorySegment inline, long outOffset, MemorySegment out) {
        if (inline.byteSize() > HashMapLayout.DEVICE_INLINE_BYTES || inline.byteSize() % Long.BYTES != 0) {
            throw new IllegalArgumentException("hash map operation: key and value bytes=" + inline.byteSize()
                    + " expected a multiple of 8 of at most " + HashMapLayout.DEVICE_INLINE_BYTES + " (fix: check"
                    + " HashMapLayout.checkDeviceSizes when the map is created)");
        }
        checkRange(outOffset, out.byteSize());
        long part = peerData(operation.owner());
        if (part == 0) {
            throw new UnsupportedOperationException("hash map operation: rank=" + operation.owner() + "'s memory is not"
                    + " mapped on rank=" + group.rank() + " (fix: a group whose GPUs map each other's memory)");
        }
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        try (Arena a = Arena.ofConfined()) {
            CudaLaunch params = new CudaLaunch(a).pointer(part).pointer(data[group.rank()] + outOffset)
                    .bytes(inline, HashMapLayout.DEVICE_INLINE_BYTES).size(operation.hash()).integer(operation.op())
                    .integer(group.rank()).size(operation.slotOffset()).size(operation.word())
                    .integer(operation.state()).size(Math.max(0, operation.waitNanos()));
            rank.launch(d, Kernel.MAP_OP, 1, params.array());
        }
        d.synchronize(rank.stream);
        // after the synchronize: the kernel's stores of the result are complete; a synchronous copy reads them
        d.copyDeviceToHost(out, data[group.rank()] + outOffset, out.byteSize());
    }

    @Override
    public void readNow(long offset, MemorySegment dst) {
        checkRange(offset, dst.byteSize());
        transport.driver().setCurrent(rank.context);
        // the default (legacy) stream, not this rank's: a peer's kernel wrote the bytes, and this stream may be busy
        transport.driver().copyDeviceToHost(dst, data[group.rank()] + offset, dst.byteSize());
    }

    @Override
    public void readPeerNow(int peer, long offset, MemorySegment dst) {
        checkRange(offset, dst.byteSize());
        long from = peerData(peer) + offset;
        transport.driver().setCurrent(rank.context);
        // the default (legacy) stream, as readNow: the peer's host wrote the bytes, not this rank's stream
        transport.driver().copyDeviceToHost(dst, from, dst.byteSize());
    }

    @Override
    public void writeNow(MemorySegment src, long offset) {
        copyFromHost(src, offset);
    }

    @Override
    public void zeroNow(long offset, long bytes) {
        checkRange(offset, bytes);
        transport.driver().setCurrent(rank.context);
        // on the default (legacy) stream, as readNow's and writeNow's copies: performed before the next of them
        transport.driver().memset(data[group.rank()] + offset, (byte) 0, bytes);
    }

    private void checkRange(long offset, long bytes) {
        if (offset < 0 || bytes < 0 || offset > byteSize - bytes) {
            throw new IndexOutOfBoundsException("range offset=" + offset + " bytes=" + bytes + " outside symmetric memory of "
                    + byteSize + " bytes (fix: pass 0 <= offset and offset + bytes <= " + byteSize + ")");
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
        if (nvshmem != null) {
            // NVSHMEM's puts may complete after the stream's work has run (remote transports): quiet them first
            nvshmem.quietOnStream(rank.stream);
        }
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
                    + " outside symmetric memory of " + byteSize + " bytes (fix: pass 0 <= dstOffset <= " + byteSize
                    + " - src.byteSize())");
        }
        if (nvshmem != null) {
            // NVSHMEM delivers the data before the signal update (put-with-signal's ordering), the release a
            // waiter's acquire pairs with; addresses are this PE's symmetric ones, the PE is the peer's rank
            transport.driver().setCurrent(rank.context);
            nvshmem.putSignalOnStream(data[group.rank()] + dstOffset, src.address(), src.byteSize(),
                    pads[group.rank()] + signalOffset(slot), value, op, peer, rank.stream);
            return;
        }
        launchPut(peerData(peer) + dstOffset, src.address(), src.byteSize(), peerPad(peer) + signalOffset(slot), value, op);
    }

    @Override
    public void signal(int peer, int slot, long value, SignalOp op) {
        Objects.checkIndex(peer, data.length);
        checkSlot(slot);
        if (nvshmem != null) {
            // release: NVSHMEM's signal update is ordered after this PE's earlier puts on the stream
            transport.driver().setCurrent(rank.context);
            nvshmem.signalOnStream(pads[group.rank()] + signalOffset(slot), value, op, peer, rank.stream);
            return;
        }
        launchPut(0, 0, 0, peerPad(peer) + signalOffset(slot), value, op);
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
    void enqueueWaitSignal(int slot, long atLeast, boolean consume) {
        checkSlot(slot);
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        if (nvshmemWait) {
            long word = pads[group.rank()] + signalOffset(slot);
            // acquire: NVSHMEM's wait orders the stream's later work after the data put before the signal
            nvshmem.waitAtLeastOnStream(word, atLeast, rank.stream);
            if (consume) {
                // after the wait on the same stream: the signaller's later additions are kept (an atomic add)
                nvshmem.signalOnStream(word, -atLeast, SignalOp.ADD, group.rank(), rank.stream);
            }
            return;
        }
        try (Arena a = Arena.ofConfined()) {
            CudaLaunch params = new CudaLaunch(a).pointer(pads[group.rank()] + signalOffset(slot)).size(atLeast);
            rank.launch(d, consume ? Kernel.WAIT_SIGNAL_CONSUME : Kernel.WAIT_SIGNAL, 1, params.array());
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

    @Override
    public boolean enqueued() {
        return true;
    }

    /** Enqueues the wait on this rank's stream ({@link #enqueueWaitSignal}) and returns {@code atLeast} at once. */
    @Override
    public long orderAfterSignal(int slot, long atLeast, int fromRank, boolean consume) {
        // acquire (device side, system scope): pairs with the signaller's release; the stream's later work sees its data
        enqueueWaitSignal(slot, atLeast, consume);
        return atLeast;
    }

    /**
     * Copies {@code value} from page-locked host memory into the slots of every rank's pad on this
     * memory's side stream — not this rank's stream, which may itself be blocked in a device-side
     * wait, nor the legacy default stream, whose synchronous copy the driver can queue behind a
     * spinning kernel and block the caller in (the 8-rank abort hang,
     * bench/results/2026-11-23-gpu-shared-8ranks-hang.md) — then polls that side stream until the
     * copies have landed or {@code timeout} has passed. The caller never blocks in the driver. Ranks
     * sharing a GPU need a hardware queue free for it: {@code CUDA_DEVICE_MAX_CONNECTIONS} above
     * twice the ranks on the GPU (32 for 8 ranks); with fewer, a copy may wait behind a peer's spinning
     * kernel and this returns false after the timeout.
     */
    @Override
    public synchronized boolean storeSignalsNow(int fromSlot, int toSlot, long value, Duration timeout) {
        Objects.checkFromToIndex(fromSlot, toSlot, CudaKernels.SIGNAL_SLOTS);
        CudaDriver d = transport.driver();
        d.setCurrent(rank.context);
        long deadline = System.nanoTime() + timeout.toNanos();
        // the staging values may still be read by an earlier call's copies: rewrite them only once those landed
        if (!idleBy(sideStream, deadline)) {
            return false;
        }
        long bytes = (long) (toSlot - fromSlot) * Long.BYTES;
        for (int slot = fromSlot; slot < toSlot; slot++) {
            storeStaging.setAtIndex(ValueLayout.JAVA_LONG, slot - fromSlot, value);
        }
        for (int peer = 0; peer < pads.length && bytes > 0; peer++) {
            if (pads[peer] == 0) {
                continue; // not mapped here (NVSHMEM, another node): that rank's own abort stores its slots
            }
            // release: a DMA copy of the value alone; it publishes nothing else, and a waiter's acquire load
            // sees the whole 8-byte value (aligned, written by one copy)
            d.copyHostToDeviceAsync(pads[peer] + signalOffset(fromSlot), storeStaging, bytes, sideStream);
        }
        return idleBy(sideStream, deadline);
    }

    /**
     * Polls {@code stream} until everything enqueued on it has completed or {@code timeout} has passed:
     * unlike a stream synchronize it gives up, so a stream blocked on a device-side wait whose peer
     * died cannot hold the caller forever.
     */
    @Override
    public boolean awaitWork(Duration timeout) {
        transport.driver().setCurrent(rank.context);
        return idleBy(rank.stream, System.nanoTime() + timeout.toNanos());
    }

    private boolean idleBy(MemorySegment stream, long deadlineNanos) {
        CudaDriver d = transport.driver();
        int polls = 0;
        while (!d.streamIdle(stream)) {
            if (System.nanoTime() - deadlineNanos > 0) {
                return false;
            }
            if (++polls < 1_000) {
                Thread.onSpinWait();
            } else {
                LockSupport.parkNanos(50_000);
            }
        }
        return true;
    }

    /** Events on this rank's stream, created here ({@link CudaWorkClock}). */
    @Override
    public WorkClock clock(int marksPerRound) {
        return new CudaWorkClock(transport.driver(), rank.context, rank.stream, marksPerRound);
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
            throw new IndexOutOfBoundsException("signal slot=" + slot + " outside [0, " + CudaKernels.SIGNAL_SLOTS + ")"
                    + " (fix: pass a slot 0 .. " + (CudaKernels.SIGNAL_SLOTS - 1) + ")");
        }
    }

    /**
     * Collective: waits for every rank (this rank's stream, then the group), then gives this rank's
     * share of the allocation back. The buffers and pads are freed when the last rank has given its
     * share back ({@link SymmetricAllocation}); an aborted group's ranks do not meet (its peers may be gone). After
     * a failed barrier or an abort (a peer gone)
     * peers may still be in their step, reading and writing this rank's memory. This rank's share
     * counts as given back once its own streams are idle (its kernels and abort stores write into
     * peers' memory), waited for at most {@link CudaRank#CLOSE_WAIT_NANOS}; a stream that does not drain
     * keeps the whole allocation (and its pointer tables and staging values) until the process exits,
     * with a warning, rather than free memory a kernel may still touch.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        rank.checkOpen("close symmetric memory id=" + id + " (close memories and communicators before"
                + " CudaTransport.release; this rank's buffer and pad could not be freed)");
        LOG.debug("symmetric memory id={} rank={} closing", id, group.rank());
        boolean met = false;
        try {
            // an aborted group's peers may be gone (a shrink's old group): its teardown frees without meeting them
            // (GroupAbort); a peer's mapping keeps this rank's exported memory alive until that peer unmaps it
            if (!group.abortState().isRaised()) {
                barrier();
                met = true;
            }
        } finally {
            CudaDriver d = transport.driver();
            d.setCurrent(rank.context);
            long deadline = System.nanoTime() + CudaRank.CLOSE_WAIT_NANOS;
            boolean drained = idleBy(rank.stream, deadline) && idleBy(sideStream, deadline);
            // destroying a busy stream is allowed: the driver releases it once its work completes
            d.destroyStream(sideStream);
            if (!met && allocation.collectiveFree()) {
                // NVSHMEM's free is a barrier of every PE: with a peer gone it would never return
                LOG.warn("symmetric memory id={} rank={}: the ranks did not meet at close; this NVSHMEM memory stays on the"
                        + " symmetric heap until the process exits (nvshmem_free waits for every PE)", id, group.rank());
            } else if (drained) {
                long tables;
                synchronized (this) {
                    tables = pointerTables;
                    pointerTables = 0;
                }
                // the pointer tables and staging values are freed with the buffers, by the last rank to close:
                // freeing waits for the device, where a peer sharing the GPU may still wait for a signal
                transport.giveBack(allocation, group.rank(), tables, storeStaging, rank.context);
            } else {
                LOG.warn("symmetric memory id={} rank={} (device {}): this rank's stream still runs {} s into close (a kernel"
                        + " waiting for a peer that never came?); every rank's buffer and pad of this memory stay allocated"
                        + " until the process exits rather than be freed under a running kernel (ranks still open: {})",
                        id, group.rank(), rank.ordinal, CudaRank.CLOSE_WAIT_NANOS / 1_000_000_000L, allocation.openRanks());
            }
        }
    }
}
