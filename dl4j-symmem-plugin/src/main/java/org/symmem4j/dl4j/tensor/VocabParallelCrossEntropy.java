package org.symmem4j.dl4j.tensor;

import org.nd4j.common.primitives.Pair;
import org.nd4j.linalg.activations.IActivation;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.nd4j.linalg.lossfunctions.ILossFunction;
import org.nd4j.linalg.ops.transforms.Transforms;
import org.nd4j.shade.jackson.annotation.JsonIgnore;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;

/**
 * Softmax cross-entropy over a vocabulary split by columns over the tensor-parallel group (Megatron's vocabulary-parallel
 * cross-entropy): this rank holds the logits {@code z} of its {@code k} columns {@code [rank k, (rank+1) k)}, every rank
 * the whole labels. Per example, with two all-reduces of one number each (a MAX and a SUM) and one for the labelled
 * logit:
 * <pre>
 *   m = max over every rank's columns of z          (all-reduce MAX)
 *   s = Σ over every rank's columns of exp(z − m)   (all-reduce SUM)
 *   p = exp(z − m) / s                               this rank's columns of the softmax
 *   loss = Σ_j y_j (m + log s − z_j)                 (the y·z part summed over the ranks)
 *   ∂loss/∂z = p − y                                 this rank's columns, no communication
 * </pre>
 * As DL4J's {@code LossMCXENT} with softmax (its gradient {@code p − y}; its score clips {@code p} to
 * {@code [softmaxClipEps, 1 − softmaxClipEps]} before the log, as {@code log p} is clipped here). The activation passed in
 * is ignored (the layer's softmax is this loss's). Per-example masks (a column) are applied; per-output masks and class
 * weights are refused. Bound to its rank's communicator by {@link VocabParallelOutputLayerImpl}; without one it refuses
 * to compute.
 */
public class VocabParallelCrossEntropy implements ILossFunction {

    private double softmaxClipEps = 1e-10;
    /** This rank's communicator over the tensor-parallel group (bound at run time, never serialized). */
    @JsonIgnore
    private transient ArrayCollectives comm;

    /** For DL4J's JSON and {@code clone()}. */
    public VocabParallelCrossEntropy() {
    }

    /**
     * A loss clipping probabilities as {@code LossMCXENT} does.
     *
     * @param softmaxClipEps the clip (DL4J's default 1e-10; 0: none)
     */
    public VocabParallelCrossEntropy(double softmaxClipEps) {
        this.softmaxClipEps = softmaxClipEps;
    }

    /** @return the probability clip of the score, as {@code LossMCXENT}'s */
    public double getSoftmaxClipEps() {
        return softmaxClipEps;
    }

    /** @param softmaxClipEps the probability clip of the score (for JSON) */
    public void setSoftmaxClipEps(double softmaxClipEps) {
        this.softmaxClipEps = softmaxClipEps;
    }

    void bind(ArrayCollectives comm) {
        this.comm = comm;
    }

    private ArrayCollectives requireComm() {
        if (comm == null) {
            throw new IllegalStateException("vocabulary-parallel cross-entropy has no group (fix: call"
                    + " TensorParallel.attach(network,"
                    + " communicator) on every rank before training or scoring)");
        }
        return comm;
    }

    /** This rank's columns of the whole labels. */
    private INDArray labelsShard(INDArray labels, INDArray logits) {
        long k = logits.size(1);
        int rank = requireComm().rank();
        if (labels.size(0) != logits.size(0) || labels.size(1) != k * requireComm().size()) {
            throw new IllegalArgumentException("labels of shape [" + labels.size(0) + ", " + labels.size(1) + "]: expected ["
                    + logits.size(0) + ", " + k * requireComm().size() + "] (the whole vocabulary, " + k + " columns on each of "
                    + requireComm().size() + " ranks; fix: give labels over the whole vocabulary)");
        }
        return labels.get(NDArrayIndex.all(), NDArrayIndex.interval(rank * k, (rank + 1) * k)).castTo(logits.dataType());
    }

    private static void checkMask(INDArray mask) {
        if (mask != null && !mask.isColumnVectorOrScalar()) {
            throw new UnsupportedOperationException("vocabulary-parallel cross-entropy: per-output masks are not supported"
                    + " (mask shape " + java.util.Arrays.toString(mask.shape()) + "); fix: mask whole examples"
                    + " with a column vector");
        }
    }

    /** Per example: the global maximum {@code m} and log of the sum {@code log s}, as columns. */
    private INDArray[] maxAndLogSum(INDArray logits) {
        INDArray m = logits.max(true, 1);
        requireComm().maxInPlace(m);
        INDArray s = Transforms.exp(logits.subColumnVector(m), false).sum(true, 1);
        requireComm().sumInPlace(s);
        return new INDArray[] {m, Transforms.log(s, false)};
    }

    /** Per example loss {@code Σ_j y_j (m + log s − z_j)} over the whole vocabulary, with log p clipped as LossMCXENT's p. */
    private INDArray scoreColumn(INDArray labels, INDArray logits, INDArray mask) {
        checkMask(mask);
        INDArray y = labelsShard(labels, logits);
        INDArray[] mls = maxAndLogSum(logits);
        // log p = z − m − log s, this rank's columns
        INDArray logP = logits.subColumnVector(mls[0]).subiColumnVector(mls[1]);
        if (softmaxClipEps > 0) {
            Transforms.max(logP, Math.log(softmaxClipEps), false);
            Transforms.min(logP, Math.log1p(-softmaxClipEps), false);
        }
        INDArray column = logP.muli(y).sum(true, 1).negi();
        requireComm().sumInPlace(column);
        if (mask != null) {
            column.muliColumnVector(mask.castTo(column.dataType()));
        }
        return column;
    }

    @Override
    public double computeScore(INDArray labels, INDArray preOutput, IActivation activationFn, INDArray mask, boolean average) {
        INDArray column = scoreColumn(labels, preOutput, mask);
        double score = column.sumNumber().doubleValue();
        return average ? score / column.size(0) : score;
    }

    @Override
    public INDArray computeScoreArray(INDArray labels, INDArray preOutput, IActivation activationFn, INDArray mask) {
        return scoreColumn(labels, preOutput, mask);
    }

    @Override
    public INDArray computeGradient(INDArray labels, INDArray preOutput, IActivation activationFn, INDArray mask) {
        checkMask(mask);
        INDArray y = labelsShard(labels, preOutput);
        INDArray p = probabilities(preOutput);
        INDArray grad = p.subi(y);
        if (mask != null) {
            grad.muliColumnVector(mask.castTo(grad.dataType()));
        }
        return grad;
    }

    /** This rank's columns of the softmax over the whole vocabulary. */
    INDArray probabilities(INDArray logits) {
        INDArray[] mls = maxAndLogSum(logits);
        return Transforms.exp(logits.subColumnVector(mls[0]).subiColumnVector(mls[1]), false);
    }

    @Override
    public Pair<Double, INDArray> computeGradientAndScore(INDArray labels, INDArray preOutput, IActivation activationFn,
                                                          INDArray mask, boolean average) {
        return new Pair<>(computeScore(labels, preOutput, activationFn, mask, average),
                computeGradient(labels, preOutput, activationFn, mask));
    }

    @Override
    public String name() {
        return toString();
    }

    @Override
    public String toString() {
        return "VocabParallelCrossEntropy(softmaxClipEps=" + softmaxClipEps + ")";
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof VocabParallelCrossEntropy v && v.softmaxClipEps == softmaxClipEps;
    }

    @Override
    public int hashCode() {
        return Double.hashCode(softmaxClipEps);
    }
}
