package org.symmem4j.parallel;

import java.time.Duration;
import java.util.List;

/**
 * Some ranks did not arrive where this rank waited for them: the deadline passed, or they are
 * known to be gone (their process or thread exited, or they aborted the group). Thrown on every
 * rank that waits, so no rank hangs. The group is aborted afterwards; create a new one.
 */
public class PeerTimeoutException extends SymmemException {

    /** Why the wait ended. */
    public enum Reason {
        /** The configured timeout passed. */
        DEADLINE_PASSED,
        /** A missing rank's process or thread is no longer alive. */
        PEER_EXITED,
        /** A rank aborted the group (after its own failure) and so will never arrive. */
        PEER_ABORTED,
        /** A missing rank closed the memory or communicator this rank waits on: it left, so it will never arrive. */
        PEER_LEFT
    }

    /** The rank that waited. */
    private final int rank;
    /**
     * The ranks that did not arrive, ascending; where the ranks waited for were blocked themselves, the
     * ranks that held them up (neither arrived nor waited).
     */
    private final List<Integer> missingRanks;
    /** What the waiting rank was doing. */
    private final String operation;
    /** Why the wait ended. */
    private final Reason reason;
    /** The timeout the wait had. */
    private final Duration timeout;

    /**
     * A wait that ended without the missing ranks.
     *
     * @param message      the full message (who waited, for whom, where, why, the fix)
     * @param rank         the rank that waited
     * @param missingRanks the ranks that did not arrive
     * @param operation    what the waiting rank was doing, e.g. {@code "all-reduce#12 barrier 2/3"}
     * @param reason       why the wait ended
     * @param timeout      the timeout the wait had
     */
    public PeerTimeoutException(String message, int rank, List<Integer> missingRanks, String operation,
                                Reason reason, Duration timeout) {
        super(message);
        this.rank = rank;
        this.missingRanks = List.copyOf(missingRanks);
        this.operation = operation;
        this.reason = reason;
        this.timeout = timeout;
    }

    /**
     * The rank that waited.
     *
     * @return the waiting rank
     */
    public int rank() {
        return rank;
    }

    /**
     * The ranks that did not arrive, ascending: the ranks to blame. Where the ranks this rank waited for
     * were blocked themselves (a ring neighbour waiting for a stopped rank), these are the ranks that held
     * them up, which neither arrived nor waited.
     *
     * @return the missing ranks, ascending
     */
    public List<Integer> missingRanks() {
        return missingRanks;
    }

    /**
     * What this rank was doing, for example {@code "all-reduce#12 barrier 2/3"}.
     *
     * @return the operation and its step
     */
    public String operation() {
        return operation;
    }

    /**
     * Why the wait ended.
     *
     * @return deadline, exited peer, aborted group or a peer that left
     */
    public Reason reason() {
        return reason;
    }

    /**
     * The timeout the wait had (the group's), also when it ended earlier for another reason.
     *
     * @return the wait's bound
     */
    public Duration timeout() {
        return timeout;
    }
}
