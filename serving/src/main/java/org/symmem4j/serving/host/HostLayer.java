package org.symmem4j.serving.host;

/**
 * One planned step of a {@link HostNetwork}: maps {@code rows} examples of {@link #inSize()} floats each (row after
 * row in {@code in}) to {@code rows} examples of {@link #outSize()} floats each. Used by one thread at a time; a
 * step may own scratch buffers.
 */
interface HostLayer {

    /** {@return the floats of one input example} */
    int inSize();

    /** {@return the floats of one output example} */
    int outSize();

    /** {@return multiply-adds times two of one example, for GFLOP/s} */
    long flopsPerExample();

    /**
     * Runs the step.
     *
     * @param in   {@code rows * inSize()} floats
     * @param out  at least {@code rows * outSize()} floats, overwritten
     * @param rows the examples
     */
    void forward(float[] in, float[] out, int rows);
}
