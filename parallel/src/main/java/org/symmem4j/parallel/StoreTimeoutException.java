package org.symmem4j.parallel;

import java.time.Duration;
import java.util.List;
import org.symmem4j.parallel.SymmemException;

/** Keys that no rank set before the deadline. */
public class StoreTimeoutException extends SymmemException {

    /** The keys still absent at the deadline. */
    private final List<String> missingKeys;

    /**
     * Creates the exception.
     *
     * @param missingKeys the keys still absent at the deadline
     * @param timeout the timeout that passed
     */
    public StoreTimeoutException(List<String> missingKeys, Duration timeout) {
        super("rendezvous store: keys still absent after timeout=" + timeout + ": " + missingKeys
                + " (the ranks that should set them have not arrived; check that every rank started)");
        this.missingKeys = List.copyOf(missingKeys);
    }

    /** {@return the keys still absent at the deadline (unmodifiable)} */
    public List<String> missingKeys() {
        return missingKeys;
    }
}
