package org.symmem4j.parallel.mpi;

import org.symmem4j.parallel.SymmemException;

/** Open MPI is not usable in this process; the message says why (not installed, not launched by mpirun...). Tests skip on it. */
public class MpiUnavailableException extends SymmemException {

    /**
     * Creates the exception.
     *
     * @param message why MPI is not usable, and the fix
     */
    public MpiUnavailableException(String message) {
        super(message);
    }
}
