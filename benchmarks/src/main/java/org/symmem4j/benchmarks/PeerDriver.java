package org.symmem4j.benchmarks;

import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import org.symmem4j.parallel.sync.IdleStrategy;

/**
 * Lets a JMH benchmark thread (rank 0) drive the other ranks of a group in lock-step without ever
 * leaving a rank inside a collective that rank 0 will not join: rank 0 publishes how many operations
 * it is about to run ({@link SignalChannel#request}), the peers run exactly that many and then idle, and a stop
 * request is only honoured while idle. So between JMH iterations and at tear-down no rank is left
 * waiting for a partner, and per operation the cost is one store amortized over a batch.
 */
public final class PeerDriver {

    /** Where the requested count and stop flag live: a field for threads, a signal slot for processes. */
    public interface Channel {
        long requested();

        boolean stopRequested();
    }

    /**
     * A channel in two signal slots of a small control allocation ({@code SymmetricMemory.allocate(group, 0)}),
     * which works for ranks that are processes as well as threads: rank 0 writes the slots of every
     * other rank's pad, each peer reads its own.
     */
    public static final class SignalChannel implements Channel {
        static final int REQUESTED_SLOT = 0;
        static final int STOP_SLOT = 1;

        private final SymmetricMemory control;

        public SignalChannel(SymmetricMemory control) {
            this.control = control;
        }

        /** Rank 0: the peers are to run operations until they have run {@code total} in all. */
        public void request(long total) {
            for (int peer = 1; peer < control.group().worldSize(); peer++) {
                // release: nothing to publish but the count; read by the peer's requested() (acquire)
                control.signal(peer, REQUESTED_SLOT, total, SignalOp.SET);
            }
        }

        /** Rank 0: the peers return from {@link #serve} once they have run every requested operation. */
        public void stop() {
            for (int peer = 1; peer < control.group().worldSize(); peer++) {
                // release: read by the peer's stopRequested() (acquire), only while it is idle
                control.signal(peer, STOP_SLOT, 1, SignalOp.SET);
            }
        }

        @Override
        public long requested() {
            return control.readSignal(REQUESTED_SLOT);
        }

        @Override
        public boolean stopRequested() {
            return control.readSignal(STOP_SLOT) != 0;
        }
    }

    private PeerDriver() {
    }

    /**
     * A channel for ranks that are threads of one JVM: the count rank 0 raises with a release store, read with
     * {@code getAcquire}, and its stop flag.
     *
     * @param requested the count (rank 0 raises it with {@code setRelease})
     * @param stop      whether rank 0 asked the peers to stop (a volatile read)
     * @return the channel
     */
    public static Channel inJvm(java.util.concurrent.atomic.AtomicLong requested, java.util.function.BooleanSupplier stop) {
        return new Channel() {
            @Override
            public long requested() {
                return requested.getAcquire();
            }

            @Override
            public boolean stopRequested() {
                return stop.getAsBoolean();
            }
        };
    }

    /** The peer side: runs {@code op} once per requested operation until asked to stop while idle. */
    public static long serve(Channel channel, Runnable op) {
        IdleStrategy idle = new BackoffIdleStrategy(100_000, 1_000, 1_000, 100_000);
        long done = 0;
        while (true) {
            long requested = channel.requested();
            if (done < requested) {
                while (done < requested) {
                    op.run();
                    done++;
                }
                idle.reset();
            } else if (channel.stopRequested()) {
                return done;
            } else {
                idle.idle();
            }
        }
    }
}
