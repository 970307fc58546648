package org.symmem4j.dl4j.pipeline;

import java.util.Arrays;
import org.deeplearning4j.nn.conf.CNN2DFormat;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.layers.normalization.BatchNormalization;
import org.deeplearning4j.nn.params.BatchNormalizationParamInitializer;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.ops.impl.transforms.pairwise.arithmetic.DivOp;
import org.nd4j.linalg.api.ops.impl.transforms.pairwise.arithmetic.SubOp;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.ops.transforms.Transforms;
import org.symmem4j.dl4j.SyncBatchNormLayer;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;
import org.symmem4j.parallel.Invariants;

/**
 * A {@code BatchNormalization} layer's running mean and variance in a pipeline stage.
 *
 * <p><b>Definition.</b> Each microbatch is normalized with its own statistics, exactly as DL4J's
 * training forward computes them on that microbatch (mean and biased variance over its examples, and
 * for 4-D activations over its positions too), and gamma's and beta's gradients are that
 * normalization's, summed over the microbatches like every other gradient. The running statistics
 * then follow the microbatches in order: for {@code k = 0 .. m-1},
 * {@code mean = mean - (1 - decay) * (mean - mean_k)}, and likewise the variance (or DL4J's
 * log10-deviation parameterization) — what {@code m} DL4J {@code fit} calls, one per microbatch and
 * in this order, do to them, with the same operations, so to the last bit. The batch's running
 * statistics therefore equal those of plain DL4J trained on the microbatches one after another, not
 * those of one {@code fit} on the whole batch (which takes one mean over all its examples): a
 * network with batch normalization trains as if its batch were the microbatch, for the statistics.
 *
 * <p>DL4J passes the running statistics' updates through the gradient (no division by the batch
 * size, a {@code NoOp} updater), computed from the statistics before the step. A stage instead
 * records each microbatch's statistics during its backward pass and, at the step, applies the updates
 * in order and zeroes those gradient entries, so the updater leaves the running statistics alone.
 *
 * <p>A synchronized layer ({@link SyncBatchNormLayer}, {@link PipelineSyncBatchNorm}) normalizes a microbatch with
 * the statistics of every replica's microbatch together: its recorded statistics are those merged ones, the same on
 * every replica, and each microbatch updates the running statistics once.
 */
final class BatchNormRunningStats {

    /** DL4J's {@code BatchNormalization.ONE_ON_2LOGE_10}: log10(x) / 2 = ln(x) * this. */
    private static final double ONE_ON_2LOGE_10 = 1.0 / (2 * Math.log(10.0));

    private final int layerIndex;
    private final BatchNormalization layer;
    private final org.deeplearning4j.nn.conf.layers.BatchNormalization conf;
    private final DataType dataType;
    private INDArray[] means = new INDArray[0];
    private INDArray[] variances = new INDArray[0];

    /**
     * @param layerIndex the layer's index in its stage network (the prefix of its gradient keys)
     * @param layer      the layer
     */
    BatchNormRunningStats(int layerIndex, BatchNormalization layer, DataType dataType) {
        this.layerIndex = layerIndex;
        this.layer = layer;
        this.conf = (org.deeplearning4j.nn.conf.layers.BatchNormalization) layer.conf().getLayer();
        this.dataType = dataType;
    }

    /** Forgets the recorded statistics: a new step begins with {@code microbatches} microbatches. */
    void beginStep(int microbatches) {
        if (means.length != microbatches) {
            means = new INDArray[microbatches];
            variances = new INDArray[microbatches];
        } else {
            Arrays.fill(means, null);
            Arrays.fill(variances, null);
        }
    }

    /**
     * Records microbatch {@code microbatch}'s statistics from the layer's current input (its input in
     * that microbatch's training pass), as DL4J's backward pass computes them.
     */
    void record(int microbatch) {
        if (layer instanceof SyncBatchNormLayer sync) {
            // the merged microbatch's statistics, float64 like the all-reduce that gave them
            means[microbatch] = Nd4j.createFromArray(sync.batchMean()).castTo(dataType);
            variances[microbatch] = Nd4j.createFromArray(sync.batchVariance()).castTo(dataType);
            return;
        }
        INDArray input = layer.input().castTo(dataType);
        if (input.rank() == 2) {
            means[microbatch] = input.mean(0);
            variances[microbatch] = input.var(false, 0);
        } else if (input.rank() == 4) {
            int[] dims = conf.getCnn2DFormat() == CNN2DFormat.NCHW ? new int[] {0, 2, 3} : new int[] {0, 1, 2};
            means[microbatch] = input.mean(dims);
            variances[microbatch] = input.var(false, dims);
        } else {
            throw new IllegalStateException("BatchNormalization layer " + layerIndex + " got a rank-" + input.rank()
                    + " input: expected rank 2 or 4 (DL4J's BatchNormalization backpropagates only those; fix: put"
                    + " BatchNormalization only on dense or 2-D convolutional activations)");
        }
    }

    /**
     * Data-parallel replicas: replaces this replica's recorded statistics by every replica's, in the
     * order of the global batch's pieces (replica {@code d}'s microbatch {@code k} is piece
     * {@code k * replicas + d}), so that {@link #applyInOrder} updates the running statistics with
     * every piece in order, the same on every replica. A synchronized layer's statistics are already the merged
     * microbatches', the same on every replica: they stay as they are.
     */
    void gatherAcross(ArrayCollectives dp) {
        if (layer instanceof SyncBatchNormLayer) {
            return;
        }
        int m = means.length;
        INDArray[] mine = new INDArray[2 * m];
        for (int k = 0; k < m; k++) {
            if (means[k] == null) {
                throw Invariants.violated("BatchNormalization layer " + layerIndex + " has no statistics for"
                        + " microbatch " + k + " at the step: expected one backward pass per microbatch");
            }
            mine[k] = means[k];
            mine[m + k] = variances[k];
        }
        INDArray[][] all = dp.allGather(mine);
        int replicas = all.length;
        INDArray[] pieceMeans = new INDArray[m * replicas];
        INDArray[] pieceVariances = new INDArray[m * replicas];
        for (int k = 0; k < m; k++) {
            for (int d = 0; d < replicas; d++) {
                pieceMeans[k * replicas + d] = all[d][k];
                pieceVariances[k * replicas + d] = all[d][m + k];
            }
        }
        means = pieceMeans;
        variances = pieceVariances;
    }

    /**
     * Applies every microbatch's running-statistics update in microbatch order to the layer's
     * parameters and zeroes those entries of the step's gradient ({@code gradient}: the stage's
     * gradient views, already holding the step's summed gradient).
     */
    void applyInOrder(Gradient gradient) {
        double decay = conf.getDecay();
        INDArray mean = layer.getParam(BatchNormalizationParamInitializer.GLOBAL_MEAN);
        for (int k = 0; k < means.length; k++) {
            if (means[k] == null) {
                throw Invariants.violated("BatchNormalization layer " + layerIndex + " has no statistics for"
                        + " microbatch " + k + " at the step: expected one backward pass per microbatch");
            }
            // DL4J's backward: delta = (mean - batchMean) * (1 - decay); the NoOp updater and the step: mean -= delta
            INDArray delta = Nd4j.createUninitialized(mean.dataType(), mean.shape(), mean.ordering());
            Nd4j.getExecutioner().exec(new SubOp(mean, means[k], delta));
            delta.muli(1 - decay);
            mean.subi(delta);
            if (conf.isUseLogStd()) {
                INDArray log10Std = layer.getParam(BatchNormalizationParamInitializer.GLOBAL_LOG_STD);
                INDArray variance = Nd4j.valueArrayOf(log10Std.shape(), 10.0, mean.dataType());
                Transforms.pow(variance, log10Std, false);
                variance.muli(variance);
                INDArray next = variance.mul(decay).addi(variances[k].mul(1 - decay).reshape(variance.shape()));
                INDArray step = Nd4j.createUninitialized(log10Std.dataType(), log10Std.shape(), log10Std.ordering());
                Nd4j.getExecutioner().exec(new DivOp(variance, next, step));
                Transforms.log(step, false);
                step.muli(ONE_ON_2LOGE_10);
                log10Std.subi(step);
            } else {
                INDArray variance = layer.getParam(BatchNormalizationParamInitializer.GLOBAL_VAR);
                INDArray step = Nd4j.createUninitialized(variance.dataType(), variance.shape(), variance.ordering());
                Nd4j.getExecutioner().exec(new SubOp(variance, variances[k], step));
                step.muli(1 - decay);
                variance.subi(step);
            }
        }
        for (String name : new String[] {BatchNormalizationParamInitializer.GLOBAL_MEAN,
                BatchNormalizationParamInitializer.GLOBAL_VAR, BatchNormalizationParamInitializer.GLOBAL_LOG_STD}) {
            INDArray view = gradient.getGradientFor(layerIndex + "_" + name);
            if (view != null) {
                view.assign(0);
            }
        }
    }
}
