package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DeviceTimingListener;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * The GPU time of a rank's all-reduces, off the critical path: a ring of event pairs, a pair recorded on the rank's
 * stream around each enqueued all-reduce ({@link #begin}, {@link #end}) and reported to a
 * {@link DeviceTimingListener} once the GPU has run past its second event ({@link #harvest}), by querying the event,
 * never by waiting for it. A stream runs its work in order, so pairs finish in the order they were recorded and a
 * harvest stops at the first pending one.
 *
 * <pre>
 *   pair p = seq % capacity: events 2p (before the all-reduce's first operation) and 2p + 1 (after its last)
 *
 *     tail               head
 *      |  recorded, not   |  free (recorded again by the next begin)
 *      v  yet reported    v
 *   [ done done pending pending . . . . . ]      head - tail &lt;= capacity
 * </pre>
 *
 * <p>{@link #begin} harvests when half the pairs are pending (one event query per finished pair, one for the first
 * pending), so an all-reduce usually costs two event records; when every pair is pending (the GPU is
 * {@code capacity} all-reduces behind the host) the all-reduce goes untimed and is counted in {@link #dropped}, rather
 * than waiting for the GPU or creating events on the hot path (creating one may wait for a context that ranks share:
 * see {@link CudaWorkClock}). A begin without an end (the all-reduce threw) leaves its pair free: the next begin
 * records over it.
 *
 * <p>The events come from an {@link EventSource}: {@link #cuda} on a rank's stream, a fake clock in tests. Not
 * thread-safe: the rank's thread that runs the communicator uses it.
 */
final class AllReduceEventTimer implements AutoCloseable {

    /** Pairs a communicator's timer holds: 64 events; a data-parallel step enqueues one all-reduce. */
    static final int DEFAULT_PAIRS = 32;

    private static final Logger LOG = LoggerFactory.getLogger(AllReduceEventTimer.class);

    /**
     * A fixed set of events, numbered from 0, on one stream.
     */
    interface EventSource extends AutoCloseable {
        /** Records event {@code event} on the stream: it completes when the work enqueued before it has run. */
        void record(int event);

        /** Whether event {@code event} has completed; never waits. */
        boolean done(int event);

        /** Milliseconds between two completed events, {@code start} recorded first. */
        float elapsedMillis(int start, int end);

        /** Destroys the events. */
        @Override
        void close();
    }

    private final EventSource events;
    private final int capacity;
    private final Algorithm[] algorithms;
    private final long[] bytes;
    /** Pairs recorded (begun and ended). */
    private long head;
    /** Pairs reported or dropped by {@link #stop()}. */
    private long tail;
    private long dropped;
    private boolean warnedFull;
    private DeviceTimingListener listener;

    /**
     * @param events   {@code 2 * capacity} events
     * @param capacity pairs, at least 1
     * @param listener receives the timed all-reduces
     */
    AllReduceEventTimer(EventSource events, int capacity, DeviceTimingListener listener) {
        if (capacity < 1) {
            throw Invariants.violated("capacity=" + capacity + " expected >= 1 event pair");
        }
        this.events = events;
        this.capacity = capacity;
        this.algorithms = new Algorithm[capacity];
        this.bytes = new long[capacity];
        this.listener = java.util.Objects.requireNonNull(listener, "listener");
    }

    /**
     * A timer over {@code 2 * capacity} events of {@code driver} (timing enabled: default flags) recorded on
     * {@code stream}; the context must be current.
     */
    static AllReduceEventTimer cuda(CudaDriver driver, MemorySegment stream, int capacity, DeviceTimingListener listener) {
        return new AllReduceEventTimer(new CudaEvents(driver, stream, 2 * capacity), capacity, listener);
    }

    /** Replaces the listener; samples not yet reported go to it. */
    void listener(DeviceTimingListener listener) {
        this.listener = java.util.Objects.requireNonNull(listener, "listener");
    }

    /**
     * Records the start event of the next pair, before the all-reduce enqueues its work.
     *
     * @return false when every pair is pending (the all-reduce goes untimed: call no {@link #end})
     */
    boolean begin() {
        if (head - tail >= capacity / 2 + (capacity & 1)) {
            harvest();
        }
        if (head - tail == capacity) {
            dropped++;
            if (!warnedFull) {
                warnedFull = true;
                LOG.warn("GPU all-reduce timing: all {} event pairs are pending (the GPU runs {} all-reduces behind the"
                        + " host); all-reduces go untimed until it catches up (harvestTimings() more often, or"
                        + " synchronize())", capacity, capacity);
            }
            return false;
        }
        events.record(2 * slot(head));
        return true;
    }

    /**
     * Records the end event of the pair {@link #begin} started, after the all-reduce enqueued its work.
     *
     * @param algorithm the algorithm it ran with
     * @param bytes     its payload on this rank
     */
    void end(Algorithm algorithm, long bytes) {
        int p = slot(head);
        events.record(2 * p + 1);
        algorithms[p] = algorithm;
        this.bytes[p] = bytes;
        head++;
    }

    /**
     * Reports every finished pair, oldest first; stops at the first pending one.
     *
     * @return how many were reported
     */
    int harvest() {
        int n = 0;
        while (tail < head) {
            int p = slot(tail);
            if (!events.done(2 * p + 1)) {
                break;
            }
            long nanos = Math.round(events.elapsedMillis(2 * p, 2 * p + 1) * 1e6);
            Algorithm a = algorithms[p];
            long b = bytes[p];
            tail++; // before the listener: a listener that throws loses its sample, not the ring's order
            listener.allReduceTimed(a, b, nanos);
            n++;
        }
        return n;
    }

    /** Drops the pairs not yet reported. */
    void stop() {
        tail = head;
    }

    /** {@return all-reduces that went untimed because every pair was pending} */
    long dropped() {
        return dropped;
    }

    /** {@return pairs recorded and not yet reported} */
    int pending() {
        return (int) (head - tail);
    }

    private int slot(long seq) {
        return (int) (seq % capacity);
    }

    @Override
    public void close() {
        events.close();
    }

    /** CUDA events on one stream, created at once (the context current). */
    private static final class CudaEvents implements EventSource {
        private final CudaDriver driver;
        private final MemorySegment stream;
        private final MemorySegment[] events;

        CudaEvents(CudaDriver driver, MemorySegment stream, int count) {
            this.driver = driver;
            this.stream = stream;
            this.events = new MemorySegment[count];
            try {
                for (int i = 0; i < count; i++) {
                    events[i] = driver.createEvent(); // default flags: timing enabled
                }
            } catch (RuntimeException e) {
                close();
                throw e;
            }
        }

        @Override
        public void record(int event) {
            driver.record(events[event], stream);
        }

        @Override
        public boolean done(int event) {
            return driver.eventDone(events[event]);
        }

        @Override
        public float elapsedMillis(int start, int end) {
            return driver.elapsedMillis(events[start], events[end]);
        }

        @Override
        public void close() {
            for (int i = 0; i < events.length; i++) {
                if (events[i] != null) {
                    driver.destroyEvent(events[i]);
                    events[i] = null;
                }
            }
        }
    }
}
