package org.symmem4j.dl4j.tensor;

import java.util.Collection;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.LayerValidation;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.nd4j.linalg.activations.impl.ActivationSoftmax;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.lossfunctions.impl.LossMCXENT;

/**
 * A softmax cross-entropy output layer whose vocabulary (its outputs) is split by columns over the tensor-parallel group:
 * a DL4J {@link OutputLayer} of this rank's {@code nOut / size} columns, with {@link VocabParallelCrossEntropy} as its
 * loss, so the logits of the whole vocabulary never sit on one rank in training. Made by
 * {@link TensorParallel#shard(org.deeplearning4j.nn.multilayer.MultiLayerNetwork, int, int, java.util.Set, int...)} with {@link TensorParallel.VocabularyParallel#OUTPUT}; its input is replicated (as a row-parallel layer's output
 * is), its input gradient summed over the ranks, and {@code output()} gives the whole vocabulary's probabilities on every
 * rank (gathered).
 */
public class VocabParallelOutputLayer extends OutputLayer {

    /** The number of ranks the vocabulary is split over (part of the configuration's JSON). */
    private int tensorParallelSize = 1;

    /** For DL4J's JSON deserialization and {@code clone()}. */
    public VocabParallelOutputLayer() {
    }

    /**
     * This rank's shard of {@code output}: every setting copied, {@code nOut} divided by {@code size}, and the loss
     * replaced by its vocabulary-parallel form (the same clip).
     *
     * @param output a softmax output layer with DL4J's multi-class cross-entropy, no class weights
     * @param size   the tensor-parallel group's size, dividing {@code nOut}
     * @return the shard's configuration
     * @throws IllegalArgumentException when the layer is not softmax with {@code LossMCXENT}, has class weights, or its
     *                                  width is not divisible by {@code size}
     */
    static VocabParallelOutputLayer shardOf(OutputLayer output, int size) {
        if (!(output.getActivationFn() instanceof ActivationSoftmax) || !(output.getLossFn() instanceof LossMCXENT mcxent)) {
            throw new IllegalArgumentException("output layer with activation " + output.getActivationFn() + " and loss "
                    + output.getLossFn() + ": a vocabulary-parallel output is softmax with LossMCXENT (multi-class"
                    + " cross-entropy); fix: keep this output layer whole");
        }
        if (mcxent.getWeights() != null) {
            throw new IllegalArgumentException("output layer's LossMCXENT has class weights: not supported by the"
                    + " vocabulary-parallel cross-entropy; fix: keep this output layer whole");
        }
        if (output.getNOut() % size != 0) {
            throw new IllegalArgumentException("output layer has nOut=" + output.getNOut() + ", not divisible by the"
                    + " tensor-parallel size " + size + " (its vocabulary is split evenly; degrees that work: "
                    + TensorParallelReslice.degreesThatWork(java.util.List.of(output.getNOut())) + "; fix: choose one of"
                    + " those degrees, or pad the vocabulary to a multiple)");
        }
        VocabParallelOutputLayer shard = ShardedLayerConfig.copySettings(OutputLayer.class, output, new VocabParallelOutputLayer());
        shard.setNOut(output.getNOut() / size);
        shard.setLossFn(new VocabParallelCrossEntropy(mcxent.getSoftmaxClipEps()));
        shard.tensorParallelSize = size;
        return shard;
    }

    /**
     * The number of ranks the vocabulary is split over.
     *
     * @return the tensor-parallel group's size this layer was sharded for
     */
    public int getTensorParallelSize() {
        return tensorParallelSize;
    }

    /**
     * Sets the number of ranks the vocabulary is split over (for JSON; use {@link TensorParallel#shard(org.deeplearning4j.nn.multilayer.MultiLayerNetwork, int, int, java.util.Set, int...)} with {@link TensorParallel.VocabularyParallel#OUTPUT}).
     *
     * @param tensorParallelSize at least 1
     * @throws IllegalArgumentException when below 1
     */
    public void setTensorParallelSize(int tensorParallelSize) {
        this.tensorParallelSize = ShardedLayerConfig.requireSize(tensorParallelSize);
    }

    /** As DL4J's {@code OutputLayer.instantiate}, with the vocabulary-parallel implementation. */
    @Override
    public Layer instantiate(NeuralNetConfiguration conf, Collection<TrainingListener> trainingListeners, int layerIndex,
                             INDArray layerParamsView, boolean initializeParams, DataType networkDataType) {
        LayerValidation.assertNInNOutSet(getClass().getSimpleName(), getLayerName(), layerIndex, getNIn(), getNOut());
        return ShardedLayerConfig.wire(new VocabParallelOutputLayerImpl(conf, networkDataType), conf, trainingListeners,
                layerIndex, layerParamsView, initializeParams, initializer());
    }

    @Override
    public VocabParallelOutputLayer clone() {
        return (VocabParallelOutputLayer) super.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof VocabParallelOutputLayer v && v.tensorParallelSize == tensorParallelSize && super.equals(o);
    }

    @Override
    public int hashCode() {
        return 31 * super.hashCode() + tensorParallelSize;
    }
}
