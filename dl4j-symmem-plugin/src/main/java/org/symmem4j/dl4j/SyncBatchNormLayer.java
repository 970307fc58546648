package org.symmem4j.dl4j;

import org.deeplearning4j.nn.conf.CNN2DFormat;
import org.deeplearning4j.nn.gradient.DefaultGradient;
import org.deeplearning4j.nn.gradient.Gradient;
import org.deeplearning4j.nn.layers.normalization.BatchNormalization;
import org.deeplearning4j.nn.params.BatchNormalizationParamInitializer;
import org.deeplearning4j.nn.workspace.ArrayType;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.api.ops.impl.broadcast.BroadcastAddOp;
import org.nd4j.linalg.api.ops.impl.broadcast.BroadcastDivOp;
import org.nd4j.linalg.api.ops.impl.broadcast.BroadcastMulOp;
import org.nd4j.linalg.api.ops.impl.broadcast.BroadcastSubOp;
import org.nd4j.linalg.api.ops.impl.transforms.pairwise.arithmetic.DivOp;
import org.nd4j.linalg.api.ops.impl.transforms.pairwise.arithmetic.SubOp;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.ops.transforms.Transforms;
import org.symmem4j.parallel.Invariants;

/**
 * DL4J's {@code BatchNormalization} layer whose training pass normalizes with the statistics of every worker's batch
 * together — the merged batch's — instead of this worker's alone: what {@link SyncBatchNorm} puts in a replica in
 * place of DL4J's layer. The configuration, parameters, gradient views and updater are DL4J's, untouched; inference
 * ({@code TEST} mode, the running statistics) is DL4J's own code.
 *
 * <p>With x a channel's values on this worker (over examples, and positions for 4-D input), n their count, and sums
 * over all workers written Σ_w:
 * <ul>
 *   <li>forward: N = Σ_w n and the mean m = Σ_w Σx / N (one all-reduce of n and the channels' sums), then the biased
 *       variance v = Σ_w Σ(x − m)² / N (a second, two-pass for accuracy), x̂ = (x − m) / √(v + ε),
 *       y = γ x̂ + β: DL4J's training forward on the merged batch;</li>
 *   <li>backward, g = dL/dy: the two sums the input gradient needs, Σg and Σ g·x̂, all-reduced in one message, and
 *       dL/dx = γ / √(v + ε) · (g − Σ_w Σg / N − x̂ · Σ_w Σ g·x̂ / N); γ's and β's gradients are this worker's
 *       Σ g·x̂ and Σg, which the wrapper sums over the workers like every other gradient;</li>
 *   <li>running statistics: the updates DL4J writes into the gradient view (a NoOp updater applies them), computed
 *       as DL4J does from the merged m and v: (μ − m)(1 − d) for the mean, (σ² − v)(1 − d) for the variance, and
 *       ½ log10(σ² / (d σ² + (1 − d) v)) for log10(std). Every worker writes the same values, so the wrapper's merge
 *       of these entries ({@link StateUpdateReduction}) leaves them as they are.</li>
 * </ul>
 * An idle worker (a short last step) runs the passes with zero contributions: the collectives still meet.
 * The sums travel as float64 whatever the network's type; the arithmetic on the arrays is in the network's type.
 *
 * <p>2-D input (after a dense layer) and 4-D input in either {@link CNN2DFormat} are normalized per channel, as DL4J
 * does; DL4J's BatchNormalization takes no other rank.
 *
 * <p>Public for the plugin's pipeline package, whose stages apply the running statistics' updates themselves, one
 * microbatch after another, from {@link #batchMean()} and {@link #batchVariance()}; built only by {@link SyncBatchNorm}.
 */
public final class SyncBatchNormLayer extends BatchNormalization {

    /** DL4J's {@code BatchNormalization.ONE_ON_2LOGE_10}: log10(x) / 2 = ln(x) * this. */
    private static final double ONE_ON_2LOGE_10 = 1.0 / (2 * Math.log(10.0));

    private final transient SyncBatchNorm sync;
    private final String name;
    /** The last training forward's merged statistics and count, read by the backward pass. */
    private double[] mean;
    private double[] variance;
    private double[] std;
    private double count;

    /**
     * @param original DL4J's layer this one replaces (configuration, index, listeners, parameter and gradient views)
     * @param sync     the worker's collectives
     * @param name     the layer's name or index, for messages
     */
    SyncBatchNormLayer(BatchNormalization original, SyncBatchNorm sync, String name) {
        super(original.conf(), original.getDataType());
        this.sync = sync;
        this.name = name;
        setIndex(original.getIndex());
        setListeners(original.getListeners());
        setParamsViewArray(original.params());
        setParamTable(original.paramTable(false));
        if (original.getGradientsViewArray() != null) {
            setBackpropGradientsViewArray(original.getGradientsViewArray());
        }
    }

    /**
     * The merged batch's per-channel mean in the last training forward pass (every rank's examples of that pass).
     *
     * @return a copy, float64, one value per channel
     * @throws IllegalStateException before a training forward pass
     */
    public double[] batchMean() {
        requireStatistics();
        return mean.clone();
    }

    /**
     * The merged batch's per-channel biased variance in the last training forward pass, as DL4J computes a batch's.
     *
     * @return a copy, float64, one value per channel
     * @throws IllegalStateException before a training forward pass
     */
    public double[] batchVariance() {
        requireStatistics();
        return variance.clone();
    }

    private void requireStatistics() {
        if (mean == null) {
            throw Invariants.violated("BatchNormalization layer " + name + ": its merged statistics were read before"
                    + " any training forward pass");
        }
    }

    @Override
    public INDArray preOutput(INDArray x, TrainingMode training, LayerWorkspaceMgr workspaceMgr) {
        if (training != TrainingMode.TRAIN) {
            return super.preOutput(x, training, workspaceMgr);
        }
        int axis = channelAxis(x);
        int[] dims = reductionDims(x);
        int channels = (int) x.size(axis);
        boolean idle = sync.idle();
        // n and Σx per channel, then Σ(x − m)² per channel: float64, all-reduced in rank order
        double[] first = new double[channels + 1];
        if (!idle) {
            first[0] = x.length() / channels;
            double[] sums = x.sum(dims).castTo(DataType.DOUBLE).toDoubleVector();
            System.arraycopy(sums, 0, first, 1, channels);
        }
        sync.allReduce(first, "forward (count and sums) of BatchNormalization layer " + name);
        count = first[0];
        if (!(count > 0)) {
            throw Invariants.violated("BatchNormalization layer " + name + ": no examples on any worker in a training"
                    + " forward pass (count " + count + ")");
        }
        mean = new double[channels];
        for (int c = 0; c < channels; c++) {
            mean[c] = first[c + 1] / count;
        }
        INDArray xMu = Nd4j.createUninitialized(x.dataType(), x.shape(), x.ordering());
        Nd4j.getExecutioner().exec(new BroadcastSubOp(x, vector(mean, x.dataType()), xMu, axis));
        double[] squares = idle ? new double[channels]
                : xMu.mul(xMu).sum(dims).castTo(DataType.DOUBLE).toDoubleVector();
        sync.allReduce(squares, "forward (centred squares) of BatchNormalization layer " + name);
        variance = new double[channels];
        std = new double[channels];
        double eps = layerConf().getEps();
        for (int c = 0; c < channels; c++) {
            variance[c] = squares[c] / count;
            std[c] = Math.sqrt(variance[c] + eps);
        }
        INDArray normalized = Nd4j.createUninitialized(x.dataType(), x.shape(), x.ordering());
        Nd4j.getExecutioner().exec(new BroadcastDivOp(xMu, vector(std, x.dataType()), normalized, axis));
        xHat = workspaceMgr.leverageTo(ArrayType.INPUT, normalized);
        INDArray out = workspaceMgr.createUninitialized(ArrayType.ACTIVATIONS, x.dataType(), x.shape(), x.ordering());
        if (layerConf().isLockGammaBeta()) {
            out.assign(xHat).muli(layerConf().getGamma()).addi(layerConf().getBeta());
        } else {
            Nd4j.getExecutioner().exec(new BroadcastMulOp(xHat, getParam(BatchNormalizationParamInitializer.GAMMA)
                    .reshape(channels), out, axis));
            Nd4j.getExecutioner().exec(new BroadcastAddOp(out, getParam(BatchNormalizationParamInitializer.BETA)
                    .reshape(channels), out, axis));
        }
        return out;
    }

    @Override
    public Pair<Gradient, INDArray> backpropGradient(INDArray epsilon, LayerWorkspaceMgr workspaceMgr) {
        assertInputSet(true);
        if (xHat == null || mean == null || !java.util.Arrays.equals(xHat.shape(), epsilon.shape())) {
            throw Invariants.violated("BatchNormalization layer " + name + ": backward pass without the training forward"
                    + " pass of the same shape before it");
        }
        int axis = channelAxis(epsilon);
        int[] dims = reductionDims(epsilon);
        int channels = mean.length;
        DataType type = xHat.dataType();
        INDArray g = epsilon.dataType() == type ? epsilon : epsilon.castTo(type);
        INDArray sumG = g.sum(dims);
        INDArray sumGxHat = g.mul(xHat).sum(dims);
        double[] sums = new double[2 * channels];
        if (!sync.idle()) {
            System.arraycopy(sumG.castTo(DataType.DOUBLE).toDoubleVector(), 0, sums, 0, channels);
            System.arraycopy(sumGxHat.castTo(DataType.DOUBLE).toDoubleVector(), 0, sums, channels, channels);
        }
        sync.allReduce(sums, "backward (Σ dL/dy and Σ dL/dy·x̂) of BatchNormalization layer " + name);
        double[] meanG = new double[channels];
        double[] meanGxHat = new double[channels];
        double[] scale = new double[channels];
        double gammaFixed = layerConf().getGamma();
        INDArray gamma = layerConf().isLockGammaBeta() ? null
                : getParam(BatchNormalizationParamInitializer.GAMMA).castTo(DataType.DOUBLE);
        for (int c = 0; c < channels; c++) {
            meanG[c] = sums[c] / count;
            meanGxHat[c] = sums[channels + c] / count;
            scale[c] = (gamma == null ? gammaFixed : gamma.getDouble(c)) / std[c];
        }
        // dL/dx = γ/std · (g − mean(g) − x̂ · mean(g·x̂)), per channel
        INDArray dx = workspaceMgr.createUninitialized(ArrayType.ACTIVATION_GRAD, type, epsilon.shape(), epsilon.ordering());
        INDArray tmp = Nd4j.createUninitialized(type, epsilon.shape(), epsilon.ordering());
        Nd4j.getExecutioner().exec(new BroadcastMulOp(xHat, vector(meanGxHat, type), tmp, axis));
        Nd4j.getExecutioner().exec(new BroadcastSubOp(g, vector(meanG, type), dx, axis));
        dx.subi(tmp);
        Nd4j.getExecutioner().exec(new BroadcastMulOp(dx, vector(scale, type), dx, axis));

        Gradient gradient = new DefaultGradient();
        if (!layerConf().isLockGammaBeta()) {
            INDArray dGamma = gradientViews.get(BatchNormalizationParamInitializer.GAMMA);
            INDArray dBeta = gradientViews.get(BatchNormalizationParamInitializer.BETA);
            dGamma.assign(sumGxHat.reshape(dGamma.shape()));
            dBeta.assign(sumG.reshape(dBeta.shape()));
            gradient.setGradientFor(BatchNormalizationParamInitializer.GAMMA, dGamma);
            gradient.setGradientFor(BatchNormalizationParamInitializer.BETA, dBeta);
        }
        writeRunningStatisticsUpdates(gradient, type);
        return new Pair<>(gradient, dx);
    }

    /**
     * The running statistics' updates, as DL4J's backward pass writes them (the same operations), from the merged
     * batch's mean and variance.
     */
    private void writeRunningStatisticsUpdates(Gradient gradient, DataType type) {
        double decay = layerConf().getDecay();
        INDArray globalMean = getParam(BatchNormalizationParamInitializer.GLOBAL_MEAN);
        INDArray batchMean = vector(mean, type).reshape(globalMean.shape());
        INDArray batchVar = vector(variance, type).reshape(globalMean.shape());
        INDArray dMean = gradientViews.get(BatchNormalizationParamInitializer.GLOBAL_MEAN);
        Nd4j.getExecutioner().exec(new SubOp(globalMean, batchMean, dMean));
        dMean.muli(1 - decay);
        gradient.setGradientFor(BatchNormalizationParamInitializer.GLOBAL_MEAN, dMean);
        if (layerConf().isUseLogStd()) {
            INDArray log10Std = getParam(BatchNormalizationParamInitializer.GLOBAL_LOG_STD);
            INDArray runningVar = Nd4j.valueArrayOf(log10Std.shape(), 10.0, log10Std.dataType());
            Transforms.pow(runningVar, log10Std, false);
            runningVar.muli(runningVar);
            INDArray next = runningVar.mul(decay).addi(batchVar.mul(1 - decay));
            INDArray dLog10Std = gradientViews.get(BatchNormalizationParamInitializer.GLOBAL_LOG_STD);
            Nd4j.getExecutioner().exec(new DivOp(runningVar, next, dLog10Std));
            Transforms.log(dLog10Std, false);
            dLog10Std.muli(ONE_ON_2LOGE_10);
            gradient.setGradientFor(BatchNormalizationParamInitializer.GLOBAL_LOG_STD, dLog10Std);
        } else {
            INDArray runningVar = getParam(BatchNormalizationParamInitializer.GLOBAL_VAR);
            INDArray dVar = gradientViews.get(BatchNormalizationParamInitializer.GLOBAL_VAR);
            Nd4j.getExecutioner().exec(new SubOp(runningVar, batchVar, dVar));
            dVar.muli(1 - decay);
            gradient.setGradientFor(BatchNormalizationParamInitializer.GLOBAL_VAR, dVar);
        }
    }

    private static INDArray vector(double[] values, DataType type) {
        INDArray v = Nd4j.createFromArray(values);
        return type == DataType.DOUBLE ? v : v.castTo(type);
    }

    /** The channel axis: 1 for 2-D input and NCHW, 3 for NHWC. */
    private int channelAxis(INDArray x) {
        return switch (x.rank()) {
            case 2 -> 1;
            case 4 -> layerConf().getCnn2DFormat() == CNN2DFormat.NHWC ? 3 : 1;
            default -> throw new IllegalStateException("BatchNormalization layer " + name + " got a rank-" + x.rank()
                    + " input of shape " + java.util.Arrays.toString(x.shape()) + ": expected rank 2 (dense) or 4"
                    + " (convolution), the ranks DL4J's BatchNormalization takes (fix: put the layer after a dense or"
                    + " 2-D convolution layer)");
        };
    }

    /** The axes a channel's statistics run over: every one but the channel axis. */
    private int[] reductionDims(INDArray x) {
        return switch (channelAxis(x)) {
            case 1 -> x.rank() == 2 ? new int[] {0} : new int[] {0, 2, 3};
            default -> new int[] {0, 1, 2};
        };
    }
}
