package org.symmem4j.parallel;

import java.lang.foreign.MemorySegment;

/**
 * The GPU-only operations of a communicator, reached through
 * {@link Communicator#unwrap Communicator.unwrap(DeviceCommunicator.class)} — never by casting to a
 * transport's class. Host communicators do not have them ({@code unwrap} is empty there).
 *
 * <p>Device buffers are {@link MemorySegment}s whose address is a device address of this rank's GPU
 * and whose byte size is the buffer's length: pass them to collectives, copies and kernels, never
 * dereference them on the host. Everything here is enqueued on this rank's stream, in order with the
 * collectives, unless it says it waits.
 */
public interface DeviceCommunicator {

    /**
     * This rank's GPU, as the driver names it.
     *
     * @return e.g. {@code NVIDIA H100 80GB HBM3}
     */
    String deviceName();

    /**
     * This rank's GPU as the driver and the CUDA runtime number it (the ordinal of {@code cuDeviceGet} and
     * {@code cudaSetDevice}, after {@code CUDA_VISIBLE_DEVICES}): what another library on this rank's thread
     * (ND4J's CUDA backend, a framework) must use, so that its device pointers and streams are this GPU's.
     *
     * @return the device ordinal, from 0
     */
    int deviceOrdinal();

    /**
     * Free and total memory of this rank's GPU as the driver counts them ({@code cuMemGetInfo}): every allocation on the
     * device, of every process and every rank sharing it, and the contexts themselves. For reports of memory use: take
     * the free bytes before and after, with one rank per GPU.
     *
     * @return {@code {freeBytes, totalBytes}}
     */
    long[] memoryInfo();

    /**
     * Waits until everything enqueued on this rank's stream has run, then reports asynchronous errors
     * (NCCL's among them).
     */
    void synchronize();

    /**
     * Collective: captures what {@code body} enqueues on this rank's stream (collectives, puts, waits,
     * user kernels) into a graph; every rank must capture the same sequence of collectives.
     *
     * @param body enqueues the work to capture
     * @return the graph, to replay and close
     */
    DeviceGraph capture(Runnable body);

    /**
     * Times work on this rank's stream: records an event, runs {@code body} (which enqueues the
     * work), records a second event, waits for it and returns the GPU time between the two. For
     * benchmarks; the resolution is that of CUDA events (about half a microsecond).
     *
     * @param body enqueues the work to time on this rank's stream
     * @return milliseconds of GPU time from the first event to the second
     */
    double elapsedMillis(Runnable body);

    /**
     * Times every later all-reduce of this communicator on the GPU: an event pair (CUDA events, timing enabled) is
     * recorded on this rank's stream around the work each all-reduce enqueues, and the pairs that have finished are
     * reported to {@code listener} later ({@link #harvestTimings}, {@link #synchronize}, close, or an all-reduce that
     * finds the pool of pairs half used), never by waiting for the GPU. All-reduces enqueued inside
     * {@link #capture} are not timed (an event in a graph has no time). When every pair is still pending — the GPU
     * is that many all-reduces behind the host — an all-reduce goes untimed and is counted in
     * {@link #droppedTimings}.
     *
     * <p>The first call creates the pool, which may wait for the GPU's context: call it before the first collective
     * or after a {@link #synchronize} that every rank has passed, not while a peer's kernel may be waiting for this
     * rank. A later call replaces the listener (samples not yet reported go to the new one); {@code null} stops
     * timing and drops the samples not yet reported. On the rank's thread, as the collectives.
     *
     * @param listener receives each timed all-reduce, or null to stop
     */
    void timeAllReduces(DeviceTimingListener listener);

    /**
     * Reports every timed all-reduce that has finished on the GPU, oldest first, to the listener of
     * {@link #timeAllReduces}; never waits (one event query per finished pair and one for the first pending one).
     * Call it where the host has time, at the start of a training step say.
     *
     * @return how many were reported (0 when timing is off)
     */
    int harvestTimings();

    /**
     * All-reduces that went untimed because every event pair of the pool was still pending on the GPU.
     *
     * @return the count since timing started
     */
    long droppedTimings();

    /**
     * This rank's stream ({@code CUstream}), for work of the caller's own (its kernels, cuBLAS) that
     * must run in order with the collectives. Valid until the communicator is closed.
     *
     * @return the stream handle
     */
    MemorySegment stream();

    /**
     * A clock of timing events recorded on this rank's stream ({@link WorkClock#mark()}) or on another stream of its GPU
     * ({@link WorkClock#mark(MemorySegment)}), with room for {@code marksPerRound} marks per round: a timeline of work
     * on several streams. Creates the events: call it while no peer's kernel may be waiting for this rank (before the
     * first collective, or after a {@link #synchronize} every rank has passed), and close the clock after the work it
     * timed has run.
     *
     * @param marksPerRound the most marks per round
     * @return the clock; close it
     * @throws UnsupportedOperationException when this communicator has no timing events
     */
    default WorkClock clock(int marksPerRound) {
        throw new UnsupportedOperationException(getClass().getSimpleName() + " has no timing events (fix: time work on a"
                + " CudaTransport group's communicator)");
    }

    /**
     * Orders this rank's later work (the collectives enqueued after this call) after everything enqueued on
     * {@code other} so far — another library's stream on this rank's GPU (ND4J's, a framework's) whose results the
     * collectives read. Enqueued (an event recorded on {@code other}, waited for on this rank's stream): returns at once.
     *
     * @param other a stream of this rank's GPU ({@code CUstream}; {@link MemorySegment#NULL} is the legacy default stream)
     */
    void orderAfter(MemorySegment other);

    /**
     * Orders the work enqueued on {@code other} after this call after everything enqueued on this rank's stream so far
     * (the collectives' results), the other direction of {@link #orderAfter}; returns at once.
     *
     * @param other a stream of this rank's GPU ({@code CUstream}; {@link MemorySegment#NULL} is the legacy default stream)
     */
    void orderBefore(MemorySegment other);

    /**
     * Point-to-point: enqueues the send of {@code buffer} to {@code peer}, which posts the matching
     * {@link #recv}.
     *
     * @param buffer device buffer of this rank; its byte size is the message length
     * @param peer   the receiving rank
     * @throws UnsupportedOperationException when this communicator has no point-to-point engine (says why)
     */
    void send(MemorySegment buffer, int peer);

    /**
     * Point-to-point: enqueues the receive of {@code buffer.byteSize()} bytes from {@code peer}.
     *
     * @param buffer device buffer of this rank that receives the message
     * @param peer   the sending rank
     * @throws UnsupportedOperationException when this communicator has no point-to-point engine (says why)
     */
    void recv(MemorySegment buffer, int peer);

    /**
     * Allocates a device buffer on this rank's GPU (not symmetric: for inputs, outputs and
     * baselines); free it with {@link #freeDevice}.
     *
     * @param bytes size in bytes
     * @return the device buffer
     */
    MemorySegment allocateDevice(long bytes);

    /**
     * Frees a buffer from {@link #allocateDevice}, after waiting for this rank's stream. Free only where no peer's
     * kernel can be waiting for this rank (after a barrier, say): freeing waits for the peers' GPUs as well, and a
     * peer spinning in a device-side wait for this rank's next signal then never finishes — both hang.
     *
     * @param buffer the buffer
     */
    void freeDevice(MemorySegment buffer);

    /**
     * Enqueues a device-to-device copy of {@code src.byteSize()} bytes (the copy engine); either side
     * may be a peer's symmetric buffer.
     *
     * @param dst destination device buffer, at least as large as {@code src}
     * @param src source device buffer
     */
    void copyAsync(MemorySegment dst, MemorySegment src);

    /**
     * Enqueues a device-to-device copy of {@code src.byteSize()} bytes done by a kernel on this rank's
     * GPU — its threads load {@code src} and store {@code dst}, 16-byte vectors where both are 16-byte
     * aligned — instead of the copy engine ({@link #copyAsync}). Either side may be a peer's symmetric
     * buffer as mapped on this GPU ({@link SymmetricMemory#peer}): reading a peer's memory this way is
     * zero-copy access over NVLink by the kernel's own loads. Waits for nobody; ordered with the rest of
     * this rank's stream.
     *
     * @param dst destination device buffer, at least as large as {@code src}
     * @param src source device buffer
     * @throws IllegalArgumentException when {@code dst} is smaller than {@code src}
     */
    void copyByKernelAsync(MemorySegment dst, MemorySegment src);

    /**
     * Copies host bytes into a device buffer of this rank; waits for this rank's stream first and
     * returns when the copy is done: the bytes are in device memory, from pageable (e.g. an {@code Arena}'s) as from
     * page-locked host memory. On CUDA a plain {@code cuMemcpyHtoD} from pageable memory may return with
     * its DMA still in flight (CUDA Driver API, "API synchronization behavior"); the runtime waits for it.
     *
     * @param dst destination device buffer, at least {@code src.byteSize()} bytes
     * @param src host memory, all of which is copied
     */
    void copyFromHost(MemorySegment dst, MemorySegment src);

    /**
     * Copies {@code dst.byteSize()} bytes of a device buffer of this rank to host memory; waits for
     * this rank's stream first.
     *
     * @param dst destination host memory
     * @param src source device buffer, at least {@code dst.byteSize()} bytes
     */
    void copyToHost(MemorySegment dst, MemorySegment src);
}
