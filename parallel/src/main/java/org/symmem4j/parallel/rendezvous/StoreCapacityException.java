package org.symmem4j.parallel.rendezvous;

import org.symmem4j.parallel.SymmemException;

/** A store request refused because the store would exceed its capacity, or the key holds another kind of value. */
public class StoreCapacityException extends SymmemException {

    /**
     * Creates the exception.
     *
     * @param message which request was refused and why
     */
    public StoreCapacityException(String message) {
        super(message);
    }
}
