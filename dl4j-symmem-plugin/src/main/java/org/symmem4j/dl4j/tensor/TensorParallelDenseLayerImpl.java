package org.symmem4j.dl4j.tensor;

import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.nd4j.linalg.api.buffer.DataType;
import org.symmem4j.dl4j.layers.SplitDenseLayer;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;

/**
 * DL4J's dense layer implementation bound to a tensor-parallel group; the two kinds add their sums. A
 * {@link SplitDenseLayer}: deferring (the pipeline's ZB-H1), the backward leaves the weight gradient, a local product of
 * this rank's shard, to a later call; the sums stay in the forward and the input-gradient half.
 */
public abstract class TensorParallelDenseLayerImpl extends SplitDenseLayer implements TensorParallelLayer {

    /** The rank's tensor-parallel communicator: bound at run time by TensorParallel.attach, never serialized. */
    private transient ArrayCollectives comm;

    /**
     * DL4J's layer constructor ({@code instantiate} and {@code clone} call it).
     *
     * @param conf     the layer's configuration
     * @param dataType the network's data type
     */
    protected TensorParallelDenseLayerImpl(NeuralNetConfiguration conf, DataType dataType) {
        super(conf, dataType);
    }

    @Override
    public void attach(ArrayCollectives comm) {
        this.comm = comm;
    }

    @Override
    public ArrayCollectives comm() {
        return comm;
    }

    /** The group's communicator, or a clear error when the network was not attached (a clone, or a fresh network). */
    ArrayCollectives requireComm() {
        return requireComm(layerId());
    }
}
