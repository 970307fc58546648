package org.symmem4j.parallel;

/** Base of every exception symmem4j throws for a failed collective operation or group set-up. */
public class SymmemException extends RuntimeException {

    /**
     * A failure without an underlying exception.
     *
     * @param message what failed, the values found and expected, and the fix
     */
    public SymmemException(String message) {
        super(message);
    }

    /**
     * A failure caused by another exception.
     *
     * @param message what failed, the values found and expected, and the fix
     * @param cause   the underlying failure
     */
    public SymmemException(String message, Throwable cause) {
        super(message, cause);
    }
}
