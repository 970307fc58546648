package org.symmem4j.dl4j.tensor;

import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.layers.OutputLayer;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;

/**
 * The layer of a {@link VocabParallelOutputLayer}: DL4J's output layer on this rank's vocabulary columns. Its loss
 * ({@link VocabParallelCrossEntropy}) meets the other ranks for the softmax's maximum and sum; the backward's input
 * gradient {@code delta W_r^T} is this rank's part and is summed over the ranks; {@code activate} (inference, evaluation)
 * gathers the whole vocabulary's probabilities.
 */
public class VocabParallelOutputLayerImpl extends OutputLayer implements TensorParallelLayer {

    /** The rank's tensor-parallel communicator: bound at run time by TensorParallel.attach, never serialized. */
    private transient ArrayCollectives comm;

    /**
     * DL4J's layer constructor ({@code instantiate} and {@code clone} call it).
     *
     * @param conf     the layer's configuration
     * @param dataType the network's data type
     */
    public VocabParallelOutputLayerImpl(NeuralNetConfiguration conf, DataType dataType) {
        super(conf, dataType);
    }

    @Override
    public void attach(ArrayCollectives comm) {
        this.comm = comm;
        loss().bind(comm);
    }

    @Override
    public ArrayCollectives comm() {
        return comm;
    }

    private VocabParallelCrossEntropy loss() {
        return (VocabParallelCrossEntropy) layerConf().getLossFn();
    }

    private ArrayCollectives requireComm() {
        return requireComm(layerId());
    }

    @Override
    public Pair<Gradient, INDArray> backpropGradient(INDArray epsilon, LayerWorkspaceMgr workspaceMgr) {
        requireComm();
        Pair<Gradient, INDArray> result = super.backpropGradient(epsilon, workspaceMgr);
        comm.sumInPlace(result.getSecond());
        return result;
    }

    /** The whole vocabulary's softmax on every rank: this rank's columns, then every rank's gathered in rank order. */
    @Override
    public INDArray activate(boolean training, LayerWorkspaceMgr workspaceMgr) {
        ArrayCollectives c = requireComm();
        INDArray mine = loss().probabilities(preOutput(training, workspaceMgr));
        INDArray[][] all = c.allGather(new INDArray[] {mine});
        long k = mine.size(1);
        INDArray out = workspaceMgr.createUninitialized(ArrayType.ACTIVATIONS, mine.dataType(),
                new long[] {mine.size(0), k * c.size()}, 'c');
        for (int r = 0; r < c.size(); r++) {
            out.get(NDArrayIndex.all(), NDArrayIndex.interval(r * k, (r + 1) * k)).assign(all[r][0]);
        }
        if (maskArray != null) {
            applyMask(out);
        }
        return out;
    }
}
