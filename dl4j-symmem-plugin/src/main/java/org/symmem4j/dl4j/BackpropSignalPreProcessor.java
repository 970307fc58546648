package org.symmem4j.dl4j;

import org.deeplearning4j.nn.api.MaskState;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * An input preprocessor that changes nothing and reports backprop's progress. DL4J runs a layer's
 * input preprocessor backwards right after that layer's {@code backpropGradient} — in a
 * MultiLayerNetwork's backprop loop and in a ComputationGraph's {@code LayerVertex.doBackward} —
 * and by then the layer has written its gradient into the flat gradient view. So installed on a
 * replica's layers (wrapping the preprocessor a layer already had, if any), it tells the worker
 * which parts of the gradient are final while backprop goes on, without changing any layer's type
 * (wrapping layers would: DL4J checks layer classes in many places). Forward passes and masks go
 * through the wrapped preprocessor, or unchanged; the forward pass also reports that its layer is about
 * to run ({@link BackpropProgress#layerStarting}: stage 3 gathers the layer's parameters there).
 */
final class BackpropSignalPreProcessor implements InputPreProcessor {

    private static final long serialVersionUID = 1L;

    private final InputPreProcessor wrapped;
    private final String key;
    private final transient BackpropProgress progress;

    BackpropSignalPreProcessor(InputPreProcessor wrapped, String key, BackpropProgress progress) {
        this.wrapped = wrapped;
        this.key = key;
        this.progress = progress;
    }

    @Override
    public INDArray preProcess(INDArray input, int miniBatchSize, LayerWorkspaceMgr workspaceMgr) {
        if (progress != null) {
            progress.layerStarting(key); // the layer this preprocessor feeds runs its forward next
        }
        return wrapped == null ? input : wrapped.preProcess(input, miniBatchSize, workspaceMgr);
    }

    @Override
    public INDArray backprop(INDArray output, int miniBatchSize, LayerWorkspaceMgr workspaceMgr) {
        if (progress != null) {
            progress.layerWritten(key); // the layer this preprocessor feeds has just written its gradient
        }
        return wrapped == null ? output : wrapped.backprop(output, miniBatchSize, workspaceMgr);
    }

    @Override
    public InputPreProcessor clone() {
        // clones (DL4J clones configurations) report to the same replica's progress
        return new BackpropSignalPreProcessor(wrapped == null ? null : wrapped.clone(), key, progress);
    }

    @Override
    public InputType getOutputType(InputType inputType) {
        return wrapped == null ? inputType : wrapped.getOutputType(inputType);
    }

    @Override
    public Pair<INDArray, MaskState> feedForwardMaskArray(INDArray maskArray, MaskState currentMaskState, int minibatchSize) {
        return wrapped == null ? new Pair<>(maskArray, currentMaskState)
                : wrapped.feedForwardMaskArray(maskArray, currentMaskState, minibatchSize);
    }

    @Override
    public String toString() {
        return "BackpropSignalPreProcessor(layer=" + key + (wrapped == null ? "" : ", wraps " + wrapped) + ")";
    }
}
