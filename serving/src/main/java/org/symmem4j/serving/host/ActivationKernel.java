package org.symmem4j.serving.host;

/**
 * DL4J's {@code ActivationLayer}: an activation alone, applied to each example as it lies (flat, or NCHW element by
 * element; softmax only on flat examples, over each example's row).
 */
final class ActivationKernel implements HostLayer {

    private final int size;
    private final HostActivation activation;

    /**
     * @param size       floats of one example
     * @param activation the activation
     */
    ActivationKernel(int size, HostActivation activation) {
        this.size = size;
        this.activation = activation;
    }

    @Override
    public int inSize() {
        return size;
    }

    @Override
    public int outSize() {
        return size;
    }

    @Override
    public long flopsPerExample() {
        return size;
    }

    @Override
    public void forward(float[] in, float[] out, int rows) {
        System.arraycopy(in, 0, out, 0, rows * size);
        activation.apply(out, 0, rows, size);
    }
}
