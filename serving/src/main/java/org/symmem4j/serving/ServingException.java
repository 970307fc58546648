package org.symmem4j.serving;

/**
 * A request the router did not answer with a prediction, with the reason as a kind the HTTP front maps to a status.
 */
public class ServingException extends RuntimeException {

    /** Why a request was not answered. */
    public enum Kind {
        /** No such model, or that version is not served (404). */
        UNKNOWN_MODEL,
        /** The features do not have the model's input shape, or the payload is unreadable (400). */
        BAD_INPUT,
        /** The model's queue is full: retry later (503). */
        OVERLOADED,
        /** The answer did not come within the request timeout (504). */
        TIMEOUT,
        /** The router is closed (503). */
        CLOSED,
        /** The network failed on the batch (500). */
        FAILED
    }

    private final Kind kind;

    /**
     * @param kind    why
     * @param message what was expected, what was found, the fix
     */
    public ServingException(Kind kind, String message) {
        super(message);
        this.kind = kind;
    }

    /**
     * @param kind    why
     * @param message what happened
     * @param cause   the cause
     */
    public ServingException(Kind kind, String message, Throwable cause) {
        super(message, cause);
        this.kind = kind;
    }

    /** {@return why the request was not answered} */
    public Kind kind() {
        return kind;
    }
}
