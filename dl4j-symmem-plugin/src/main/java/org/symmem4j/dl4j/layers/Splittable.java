package org.symmem4j.dl4j.layers;

import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * A DL4J layer whose backward splits into the input gradient, which the previous pipeline stage waits for, and the
 * weight gradient, which no other stage needs and which a zero-bubble schedule runs later. While {@link #defer
 * deferring}, {@code backpropGradient} runs DL4J's own operations except the weight gradient's and {@linkplain #keep
 * keeps} that product's operands; {@link #weightGradient} computes it later, with DL4J's calls, into the same gradient
 * views: bitwise the unsplit backward. Not deferring, the layer is DL4J's.
 */
public interface Splittable {

    /**
     * What the weight half of one layer's backward needs, the operands of {@code dW}'s product: the layer's input
     * (after dropout; a convolution's im2col patches) and {@code dZ} (a convolution's as {@code [outDepth, rows]}).
     *
     * @param input the layer's input, the left operand of {@code dW}
     * @param delta the pre-activation gradient {@code dZ}, the right operand of {@code dW} and the bias gradient's sum
     */
    record Deferred(INDArray input, INDArray delta) {
    }

    /** Whether a split layer defers, and what its last deferred backward kept (one per layer, on its thread). */
    final class Slot {
        private boolean deferring;
        private Deferred kept;
    }

    /**
     * The layer's deferring state.
     *
     * @return the layer's own slot
     */
    Slot slot();

    /**
     * Turns deferring on or off: on, {@code backpropGradient} computes the input gradient only and keeps what the
     * weight gradient needs ({@link #takeDeferred}); off, it is DL4J's.
     *
     * @param on whether the next backward passes defer their weight gradient
     */
    default void defer(boolean on) {
        slot().deferring = on;
    }

    /**
     * Whether the next backward defers its weight gradient.
     *
     * @return true while deferring
     */
    default boolean deferring() {
        return slot().deferring;
    }

    /**
     * Keeps what the weight half needs, until {@link #takeDeferred}.
     *
     * @param deferred the operands of the weight gradient
     */
    default void keep(Deferred deferred) {
        slot().kept = deferred;
    }

    /**
     * What the last deferred backward kept, handed over once.
     *
     * @return the operands kept, or null when none is held
     */
    default Deferred takeDeferred() {
        Deferred d = slot().kept;
        slot().kept = null;
        return d;
    }

    /**
     * The input half of the layer's backward, what {@code backpropGradient} runs while deferring: DL4J's operations in
     * DL4J's order without the weight gradient's, {@linkplain #keep keeping} the weight half's operands.
     *
     * @param epsilon      the gradient of the layer's output
     * @param workspaceMgr the workspaces of the pass
     * @return the gradient (its views, filled by {@link #weightGradient} later) and the input gradient
     */
    Pair<Gradient, INDArray> inputHalf(INDArray epsilon, LayerWorkspaceMgr workspaceMgr);

    /**
     * The weight half of a deferred backward: {@code dW} and {@code db} into the layer's gradient views.
     *
     * @param deferred what the input half kept
     */
    void weightGradient(Deferred deferred);
}
