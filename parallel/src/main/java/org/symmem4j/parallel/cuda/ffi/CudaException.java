package org.symmem4j.parallel.cuda.ffi;

import org.symmem4j.parallel.SymmemException;

/** A CUDA driver or NCCL call returned an error: the function, the code, and the library's own name and text for it. */
public class CudaException extends SymmemException {

    /** The failing function, as named in the message. */
    private final String function;
    /** The library's error code. */
    private final int code;

    /**
     * Creates the exception; the message names all of the arguments.
     *
     * @param library the library, e.g. "NCCL"
     * @param function the failing function (possibly with arguments)
     * @param code the error code it returned
     * @param name the library's name for the code
     * @param text the library's description of the code
     */
    public CudaException(String library, String function, int code, String name, String text) {
        super(library + " " + function + " failed: code=" + code + " " + name + ": " + text);
        this.function = function;
        this.code = code;
    }

    /** {@return the failing function} */
    public String function() {
        return function;
    }

    /** {@return the error code the call returned} */
    public int code() {
        return code;
    }
}
