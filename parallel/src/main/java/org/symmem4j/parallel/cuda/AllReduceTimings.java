package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DeviceTimingListener;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * A CUDA communicator's switchable GPU timing of its all-reduces ({@link org.symmem4j.parallel.DeviceCommunicator
 * #timeAllReduces}): an {@link AllReduceEventTimer} on the communicator's stream while a listener is set, none while
 * off, and the all-reduces left untimed by timers stopped before the current one. Both {@link CudaCommunicator} and
 * {@link CudaHierarchicalCommunicator} keep one; the owner serializes the calls (its rank thread or its lock) and
 * this makes the rank's context current where the driver needs it.
 */
final class AllReduceTimings {

    private final CudaDriver driver;
    private final CudaRank rank;
    private final MemorySegment stream;
    /** Null while off. */
    private AllReduceEventTimer timer;
    private long droppedBefore;

    /**
     * @param stream the stream the timed all-reduces are enqueued on (the events are recorded there)
     */
    AllReduceTimings(CudaDriver driver, CudaRank rank, MemorySegment stream) {
        this.driver = driver;
        this.rank = rank;
        this.stream = stream;
    }

    /** Turns timing on with {@code listener}, switches listeners, or turns it off (null; the pending pairs dropped). */
    void listen(DeviceTimingListener listener) {
        if (listener == null) {
            if (timer != null) {
                timer.stop();
                droppedBefore += timer.dropped();
                close();
            }
        } else if (timer == null) {
            driver.setCurrent(rank.context);
            timer = AllReduceEventTimer.cuda(driver, stream, AllReduceEventTimer.DEFAULT_PAIRS, listener);
        } else {
            timer.listener(listener);
        }
    }

    /** Whether timing is on. */
    boolean on() {
        return timer != null;
    }

    /** Whether the all-reduce about to be enqueued is timed: its start event recorded (never inside a graph capture). */
    boolean begin() {
        return timer != null && !rank.capturing && timer.begin();
    }

    /** Records the end event of an all-reduce that {@link #begin} timed; the rank's context current. */
    void end(Algorithm algorithm, long bytes) {
        timer.end(algorithm, bytes);
    }

    /** Reports every finished pair to the listener without waiting; the number reported. */
    int harvest() {
        if (timer == null) {
            return 0;
        }
        driver.setCurrent(rank.context);
        return timer.harvest();
    }

    /** All-reduces left untimed so far (every pair pending), counting earlier timers'. */
    long dropped() {
        return timer == null ? droppedBefore : droppedBefore + timer.dropped();
    }

    /** Destroys the events; timing is off afterwards. */
    void close() {
        if (timer != null) {
            driver.setCurrent(rank.context);
            timer.close();
            timer = null;
        }
    }
}
