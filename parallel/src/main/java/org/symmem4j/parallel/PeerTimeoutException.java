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

    private final int rank;
    private final List<Integer> missingRanks;
    private final String operation;
    private final Reason reason;
    private final Duration timeout;

    public PeerTimeoutException(String message, int rank, List<Integer> missingRanks, String operation,
                                Reason reason, Duration timeout) {
        super(message);
        this.rank = rank;
        this.missingRanks = List.copyOf(missingRanks);
        this.operation = operation;
        this.reason = reason;
        this.timeout = timeout;
    }

    /** The rank that waited. */
    public int rank() {
        return rank;
    }

    /** The ranks that did not arrive, ascending. */
    public List<Integer> missingRanks() {
        return missingRanks;
    }

    /** What this rank was doing, for example {@code "all-reduce#12 barrier 2/3"}. */
    public String operation() {
        return operation;
    }

    public Reason reason() {
        return reason;
    }

    public Duration timeout() {
        return timeout;
    }
}
