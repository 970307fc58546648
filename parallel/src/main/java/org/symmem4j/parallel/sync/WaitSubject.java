package org.symmem4j.parallel.sync;

import java.time.Duration;

/** What a {@link Waiter} is waiting for: it knows how to tell a lost peer and how to report a timeout. */
public interface WaitSubject {

    /**
     * Throws if the wait can never succeed, for example because a peer aborted the group or its
     * process exited. Called every {@link Waiter#POLLS_PER_CHECK} polls and on every park, so
     * implementations rate-limit expensive probes themselves.
     *
     * @param waitedNanos how long this wait has lasted so far
     */
    void checkProgressPossible(long waitedNanos);

    /**
     * The exception thrown when the wait outlives {@code timeout}; it names the missing ranks.
     *
     * @param timeout the timeout that passed
     * @return the exception for the waiter to throw
     */
    RuntimeException deadlinePassed(Duration timeout);
}
