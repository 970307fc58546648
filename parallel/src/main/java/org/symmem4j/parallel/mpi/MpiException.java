package org.symmem4j.parallel.mpi;

import org.symmem4j.parallel.SymmemException;

/** An MPI call returned an error: the call, its error code and MPI's own description of it. */
public class MpiException extends SymmemException {

    /** The MPI call's return code. */
    private final int errorCode;

    /**
     * Creates the exception.
     *
     * @param message   the call and MPI's description of the error
     * @param errorCode the call's return code
     */
    public MpiException(String message, int errorCode) {
        super(message);
        this.errorCode = errorCode;
    }

    /**
     * The MPI error code the call returned.
     *
     * @return the return code (MPI_SUCCESS is 0)
     */
    public int errorCode() {
        return errorCode;
    }
}
