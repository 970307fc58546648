package org.symmem4j.state;

import org.symmem4j.parallel.SymmemException;

/** A {@link SymmetricHashMap} partition has no slot left for a new key. */
public final class MapFullException extends SymmemException {

    private final int owner;

    /**
     * @param message the full message: the key's owner, the capacity, the fix
     * @param owner   the rank whose partition is full
     */
    public MapFullException(String message, int owner) {
        super(message);
        this.owner = owner;
    }

    /** {@return the rank whose partition is full} */
    public int owner() {
        return owner;
    }
}
