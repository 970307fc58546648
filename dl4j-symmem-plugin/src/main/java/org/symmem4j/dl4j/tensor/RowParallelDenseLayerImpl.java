package org.symmem4j.dl4j.tensor;

import java.util.Arrays;
import org.deeplearning4j.exception.DL4JInvalidInputException;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.params.DefaultParamInitializer;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;

/**
 * The layer of a {@link RowParallelDenseLayer}: the pre-activation {@code z = sum_r x_r W_r + b},
 * the partial products summed over the ranks before the bias (whole on every rank) is added. DL4J's
 * backward recomputes {@code z} for the activation's derivative; the sum of the forward pass is kept
 * for it, so a training step costs one all-reduce here (a backward without a matching forward, which
 * DL4J's training does not do, recomputes it, collectively on every rank alike).
 */
public class RowParallelDenseLayerImpl extends TensorParallelDenseLayerImpl {

    /** The last training forward's pre-activation, outside any workspace (a step's state, never serialized). */
    private transient INDArray keptPreActivation;
    /** The input {@link #keptPreActivation} was computed from. */
    private transient INDArray keptForInput;

    /**
     * DL4J's layer constructor ({@code instantiate} and {@code clone} call it).
     *
     * @param conf     the layer's configuration
     * @param dataType the network's data type
     */
    public RowParallelDenseLayerImpl(NeuralNetConfiguration conf, DataType dataType) {
        super(conf, dataType);
    }


    @Override
    protected Pair<INDArray, INDArray> preOutputWithPreNorm(boolean training, boolean forBackprop,
                                                             LayerWorkspaceMgr workspaceMgr) {
        assertInputSet(forBackprop);
        applyDropOutIfNecessary(training, workspaceMgr); // refused at attach: a no-op
        INDArray w = getParamWithNoise(DefaultParamInitializer.WEIGHT_KEY, training, workspaceMgr);
        INDArray b = getParamWithNoise(DefaultParamInitializer.BIAS_KEY, training, workspaceMgr);
        INDArray x = input.dataType() == w.dataType() ? input : input.castTo(w.dataType());
        if (x.rank() != 2 || x.columns() != w.rows()) {
            throw new DL4JInvalidInputException("row-parallel layer input of shape " + Arrays.toString(x.shape())
                    + " expected [examples, " + w.rows() + "] (this rank's " + w.rows() + " of the layer's "
                    + w.rows() * ((RowParallelDenseLayer) layerConf()).getTensorParallelSize() + " input features: the"
                    + " output of the column-parallel layer before it) " + layerId() + " (fix: put this layer right after"
                    + " a ColumnParallelDenseLayer of nOut="
                    + w.rows() * ((RowParallelDenseLayer) layerConf()).getTensorParallelSize() + ")");
        }
        INDArray z = workspaceMgr.createUninitialized(ArrayType.ACTIVATIONS, w.dataType(), x.size(0), w.size(1));
        if (forBackprop && keptForInput == input && keptPreActivation != null
                && Arrays.equals(keptPreActivation.shape(), z.shape())) {
            z.assign(keptPreActivation); // the forward's sum: the same bits on every rank, no second all-reduce
        } else {
            x.mmuli(w, z);
            requireComm().sumInPlace(z);
            if (hasBias()) {
                z.addiRowVector(b);
            }
            if (training && !forBackprop) {
                try (MemoryWorkspace ignored = Nd4j.getMemoryManager().scopeOutOfWorkspaces()) {
                    keptPreActivation = z.dup();
                }
                keptForInput = input;
            }
        }
        if (forBackprop) {
            keptPreActivation = null;
            keptForInput = null;
        }
        if (maskArray != null) {
            applyMask(z);
        }
        return new Pair<>(z, z);
    }
}
