package org.symmem4j.dl4j.tensor;

import java.util.Collection;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.EmbeddingLayer;
import org.deeplearning4j.nn.conf.layers.LayerValidation;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * An embedding layer whose vocabulary (its rows) is split over the tensor-parallel group, Megatron's vocabulary-parallel
 * embedding: a DL4J {@link EmbeddingLayer} of this rank's {@code nIn / size} rows {@code [rank k, (rank+1) k)}; each rank
 * looks up the indices it holds (zeros for the others) and the rows are summed over the ranks, so every rank gets the
 * whole embedding of every example. Made by {@link TensorParallel#shard(org.deeplearning4j.nn.multilayer.MultiLayerNetwork,
 * int, int, java.util.Set, int...)} with {@link TensorParallel.VocabularyParallel#EMBEDDING}.
 */
public class VocabParallelEmbeddingLayer extends EmbeddingLayer {

    /** The number of ranks the vocabulary is split over (part of the configuration's JSON). */
    private int tensorParallelSize = 1;

    /** For DL4J's JSON deserialization and {@code clone()}. */
    public VocabParallelEmbeddingLayer() {
    }

    /**
     * This rank's shard of {@code embedding}: every setting copied and {@code nIn} (the vocabulary) divided by {@code size}.
     *
     * @param embedding an embedding layer whose vocabulary {@code size} divides
     * @param size      the tensor-parallel group's size
     * @return the shard's configuration
     * @throws IllegalArgumentException when the vocabulary is not divisible by {@code size}
     */
    static VocabParallelEmbeddingLayer shardOf(EmbeddingLayer embedding, int size) {
        if (embedding.getNIn() % size != 0) {
            throw new IllegalArgumentException("embedding layer has nIn=" + embedding.getNIn() + " (its vocabulary), not"
                    + " divisible by the tensor-parallel size " + size + " (its rows are split evenly; degrees that"
                    + " work: " + TensorParallelReslice.degreesThatWork(java.util.List.of(embedding.getNIn())) + "; fix:"
                    + " choose one of those degrees, or pad the vocabulary to a multiple)");
        }
        VocabParallelEmbeddingLayer shard = ShardedLayerConfig.copySettings(EmbeddingLayer.class, embedding,
                new VocabParallelEmbeddingLayer());
        shard.setNIn(embedding.getNIn() / size);
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
     * Sets the number of ranks the vocabulary is split over (for JSON; use {@link TensorParallel#shard}).
     *
     * @param tensorParallelSize at least 1
     * @throws IllegalArgumentException when below 1
     */
    public void setTensorParallelSize(int tensorParallelSize) {
        this.tensorParallelSize = ShardedLayerConfig.requireSize(tensorParallelSize);
    }

    /** As DL4J's {@code EmbeddingLayer.instantiate}, with the vocabulary-parallel implementation. */
    @Override
    public Layer instantiate(NeuralNetConfiguration conf, Collection<TrainingListener> trainingListeners, int layerIndex,
                             INDArray layerParamsView, boolean initializeParams, DataType networkDataType) {
        LayerValidation.assertNInNOutSet(getClass().getSimpleName(), getLayerName(), layerIndex, getNIn(), getNOut());
        return ShardedLayerConfig.wire(new VocabParallelEmbeddingLayerImpl(conf, networkDataType), conf, trainingListeners,
                layerIndex, layerParamsView, initializeParams, initializer());
    }

    @Override
    public VocabParallelEmbeddingLayer clone() {
        return (VocabParallelEmbeddingLayer) super.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof VocabParallelEmbeddingLayer v && v.tensorParallelSize == tensorParallelSize && super.equals(o);
    }

    @Override
    public int hashCode() {
        return 31 * super.hashCode() + tensorParallelSize;
    }
}
