package org.symmem4j.parallel;

/** Base of every exception symmem4j throws for a failed collective operation or group set-up. */
public class SymmemException extends RuntimeException {

    public SymmemException(String message) {
        super(message);
    }

    public SymmemException(String message, Throwable cause) {
        super(message, cause);
    }
}
