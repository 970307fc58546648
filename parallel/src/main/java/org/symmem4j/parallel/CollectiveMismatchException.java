package org.symmem4j.parallel;

/**
 * The ranks called a collective with arguments that do not agree (count, dtype, op, algorithm,
 * root, buffer size). Detected before any rank writes shared data, and thrown on every rank with
 * the same message listing what each rank passed. The group stays usable.
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
