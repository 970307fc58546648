package org.symmem4j.parallel;

/**
 * Receives the GPU time of all-reduces that a device communicator timed with CUDA events
 * ({@link DeviceCommunicator#timeAllReduces}). The communicator records an event pair around each all-reduce it
 * enqueues (no added synchronisation) and reports finished pairs later, on the rank's thread, from
 * {@link DeviceCommunicator#harvestTimings}, {@link DeviceCommunicator#synchronize}, its close, or a later all-reduce
 * when its pool of event pairs runs low: a sample arrives after the all-reduce ran, not when it was enqueued.
 *
 * <p>{@code org.symmem4j.gradsync.SyncMetrics#recordAllReduce} has this shape, so a method reference to it feeds
 * the same {@code symmem.allreduce.duration} timer and {@code symmem.allreduce.bytes} summary the host path feeds.
 */
@FunctionalInterface
public interface DeviceTimingListener {

    /**
     * One all-reduce that ran on the rank's GPU.
     *
     * @param algorithm   the algorithm it ran with
     * @param bytes       its payload on this rank ({@code dtype.bytes(count)})
     * @param deviceNanos GPU time from the event recorded before its first enqueued operation to the event recorded
     *                    after its last, in nanoseconds (CUDA events resolve about half a microsecond); it includes
     *                    the wait inside the collective for peers that arrive later, as the host timer does
     */
    void allReduceTimed(Algorithm algorithm, long bytes, long deviceNanos);
}
