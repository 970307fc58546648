package org.symmem4j.serving.host;

import org.deeplearning4j.nn.conf.ConvolutionMode;

/**
 * The geometry of a 2-D sliding window (convolution or pooling) over one NCHW example, as DL4J computes it.
 * Truncate: {@code out = (in + 2 * pad - k) / stride + 1}, rounded down, the explicit padding on both sides.
 * Same: {@code out = ceil(in / stride)}, the explicit padding ignored, a total padding of
 * {@code max(0, (out - 1) * stride + k - in)} of which the top/left side gets half rounded down (DL4J's
 * {@code ConvolutionUtils.getSameModeTopLeftPadding}); the bottom/right side gets the rest.
 *
 * @param channels input channels
 * @param inH      input height
 * @param inW      input width
 * @param kH       window height
 * @param kW       window width
 * @param sH       vertical stride
 * @param sW       horizontal stride
 * @param padTop   rows of padding above the input
 * @param padLeft  columns of padding left of the input
 * @param outH     output height
 * @param outW     output width
 */
record Window2d(int channels, int inH, int inW, int kH, int kW, int sH, int sW, int padTop, int padLeft, int outH,
                int outW) {

    /**
     * The window of a layer.
     *
     * @param layer    the layer's index, for messages
     * @param type     the layer's type, for messages
     * @param mode     Truncate or Same (the caller refuses the others)
     * @param kernel   {kH, kW}
     * @param stride   {sH, sW}
     * @param padding  {pH, pW} (ignored in Same mode)
     * @param channels input channels
     * @param inH      input height
     * @param inW      input width
     * @return the geometry
     * @throws IllegalArgumentException when the window leaves no output
     */
    static Window2d of(int layer, String type, ConvolutionMode mode, int[] kernel, int[] stride, int[] padding,
                       int channels, int inH, int inW) {
        int kH = kernel[0], kW = kernel[1], sH = stride[0], sW = stride[1];
        int outH, outW, padTop, padLeft;
        if (mode == ConvolutionMode.Same) {
            outH = (inH + sH - 1) / sH;
            outW = (inW + sW - 1) / sW;
            padTop = Math.max(0, (outH - 1) * sH + kH - inH) / 2;
            padLeft = Math.max(0, (outW - 1) * sW + kW - inW) / 2;
        } else {
            padTop = padding[0];
            padLeft = padding[1];
            outH = Math.floorDiv(inH + 2 * padTop - kH, sH) + 1;
            outW = Math.floorDiv(inW + 2 * padLeft - kW, sW) + 1;
        }
        if (outH < 1 || outW < 1 || kH < 1 || kW < 1 || sH < 1 || sW < 1) {
            throw new IllegalArgumentException("layer=" + layer + " type=" + type + " kernel=" + kH + "x" + kW
                    + " stride=" + sH + "x" + sW + " over input=" + channels + "x" + inH + "x" + inW + " leaves output="
                    + outH + "x" + outW + ", expected at least 1x1 (fix: pass the example shape the network was"
                    + " configured for)");
        }
        return new Window2d(channels, inH, inW, kH, kW, sH, sW, padTop, padLeft, outH, outW);
    }

    /** {@return the floats of one input example} */
    int inSize() {
        return channels * inH * inW;
    }

    /** {@return output positions per channel} */
    int outPlane() {
        return outH * outW;
    }
}
