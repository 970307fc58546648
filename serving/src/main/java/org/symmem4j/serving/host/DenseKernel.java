package org.symmem4j.serving.host;

import java.lang.foreign.MemorySegment;

/**
 * A dense (or output) layer: {@code y = act(x W + b)} for a batch of rows. DL4J keeps W {@code [nIn, nOut]} in 'f'
 * order in the flat parameters, which is {@code [nOut, nIn]} row-major: each output's weights are one contiguous run,
 * so every output is a dot product, computed in place from the segment (blocked over four rows, see
 * {@link SegmentGemm#rowsTimesTransposed}).
 */
final class DenseKernel implements HostLayer {

    private final int nIn;
    private final int nOut;
    private final MemorySegment params;
    private final long weightsOff;
    private final MemorySegment bias;
    private final long biasOff;
    private final HostActivation activation;

    /**
     * @param nIn        inputs
     * @param nOut       outputs
     * @param params     the network's parameters
     * @param weightsOff the byte offset of W ({@code [nIn, nOut]} 'f')
     * @param biasOff    the byte offset of b, or -1 for none
     * @param activation the activation
     */
    DenseKernel(int nIn, int nOut, MemorySegment params, long weightsOff, long biasOff, HostActivation activation) {
        this.nIn = nIn;
        this.nOut = nOut;
        this.params = params;
        this.weightsOff = weightsOff;
        this.bias = biasOff < 0 ? null : params;
        this.biasOff = biasOff;
        this.activation = activation;
    }

    @Override
    public int inSize() {
        return nIn;
    }

    @Override
    public int outSize() {
        return nOut;
    }

    @Override
    public long flopsPerExample() {
        return 2L * nIn * nOut;
    }

    @Override
    public void forward(float[] in, float[] out, int rows) {
        SegmentGemm.rowsTimesTransposed(params, weightsOff, bias, biasOff, in, 0, out, 0, rows, nOut, nIn);
        activation.apply(out, 0, rows, nOut);
    }
}
