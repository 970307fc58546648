package org.symmem4j.parallel;

/**
 * The ranks called a collective with arguments that do not agree (count, dtype, op, algorithm,
 * root, buffer size), or some rank's argument is unusable (a buffer null, too short, read-only where
 * the collective writes it, freed, or confined to another thread). Detected before any rank writes
 * shared data or a destination, and thrown on every rank with the same message naming each rank
 * at fault and what it passed. The group stays usable.
 */
public class CollectiveMismatchException extends SymmemException {

    /**
     * A mismatch found before any shared data was written.
     *
     * @param message what each rank passed and what they must agree on
     */
    public CollectiveMismatchException(String message) {
        super(message);
    }
}
