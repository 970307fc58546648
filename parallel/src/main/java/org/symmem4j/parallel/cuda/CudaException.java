package org.symmem4j.parallel.cuda;

import org.symmem4j.parallel.SymmemException;

/** A CUDA driver or NCCL call returned an error: the function, the code, and the library's own name and text for it. */
public class CudaException extends SymmemException {

    private final String function;
    private final int code;

    public CudaException(String library, String function, int code, String name, String text) {
        super(library + " " + function + " failed: code=" + code + " " + name + ": " + text);
        this.function = function;
        this.code = code;
    }

    public String function() {
        return function;
    }

    public int code() {
        return code;
    }
}
