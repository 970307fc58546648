package org.symmem4j.examples.bench;

import org.symmem4j.parallel.sync.BackoffIdleStrategy;
import org.symmem4j.parallel.sync.IdleStrategy;

/**
 * Lets a JMH benchmark thread (rank 0) drive the other ranks of a group in lock-step without ever
 * leaving a rank inside a collective that rank 0 will not join: rank 0 publishes how many operations
 * it is about to run ({@link #request}), the peers run exactly that many and then idle, and a stop
 * request is only honoured while idle. So between JMH iterations and at tear-down no rank is left
 * waiting for a partner, and per operation the cost is one store amortized over a batch.
 */
public final class PeerDriver {

    /** Where the requested count and stop flag live: a field for threads, a signal slot for processes. */
    public interface Channel {
        long requested();

        boolean stopRequested();
    }

    private PeerDriver() {
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
