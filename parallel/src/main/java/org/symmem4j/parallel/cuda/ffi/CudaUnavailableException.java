package org.symmem4j.parallel.cuda.ffi;

import org.symmem4j.parallel.SymmemException;

/** CUDA (or NCCL) is not usable on this machine; the message says why. GPU tests skip on it. */
public class CudaUnavailableException extends SymmemException {

    /**
     * Creates the exception.
     *
     * @param message why CUDA or NCCL is not usable
     */
    public CudaUnavailableException(String message) {
        super(message);
    }
}
