package org.symmem4j.serving.session;

/**
 * A session's state is gone: evicted by the cache's byte budget (least recently used first), or lost because a
 * writer died in the middle of writing it. The caller starts the session again (re-feeds its history) or answers
 * its client that the session expired.
 */
public final class SessionExpiredException extends RuntimeException {

    private static final long serialVersionUID = 1L;

    /** Why the state is gone. */
    public enum Reason {
        /** Evicted to make room within the byte budget (least recently used first). */
        EVICTED,
        /** Its writer died while writing it; the half-written state was discarded. */
        WRITER_DIED
    }

    private final String sessionId;
    private final Reason reason;

    SessionExpiredException(String sessionId, Reason reason, String message) {
        super(message);
        this.sessionId = sessionId;
        this.reason = reason;
    }

    /** {@return the session's id} */
    public String sessionId() {
        return sessionId;
    }

    /** {@return why its state is gone} */
    public Reason reason() {
        return reason;
    }
}
