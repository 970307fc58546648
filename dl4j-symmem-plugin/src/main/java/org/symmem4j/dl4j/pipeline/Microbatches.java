package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.indexing.INDArrayIndex;
import org.nd4j.linalg.indexing.NDArrayIndex;

/**
 * One training batch cut into equal microbatches along the example dimension (dimension 0 of
 * features, labels and masks, whatever their rank), as contiguous row-major copies: the first stage
 * reads {@code features().get(mb)}, the last {@code labels().get(mb)}. Masks are optional: a
 * recurrent network's features mask {@code [examples, time steps]} and labels mask, cut the same way.
 */
public final class Microbatches {

    private final List<INDArray> features;
    private final List<INDArray> labels;
    /** Null when the batch has no features mask; else one per microbatch. */
    private final List<INDArray> featuresMasks;
    /** Null when the batch has no labels mask; else one per microbatch. */
    private final List<INDArray> labelsMasks;

    /**
     * One batch cut into microbatches, with their masks.
     *
     * @param features      one array per microbatch, in order
     * @param labels        one array per microbatch, in order, same example counts as {@code features}
     * @param featuresMasks null, or one mask per microbatch with the same example counts
     * @param labelsMasks   null, or one mask per microbatch with the same example counts
     */
    public Microbatches(List<INDArray> features, List<INDArray> labels, List<INDArray> featuresMasks,
                        List<INDArray> labelsMasks) {
        this.features = List.copyOf(features);
        this.labels = List.copyOf(labels);
        this.featuresMasks = featuresMasks == null ? null : List.copyOf(featuresMasks);
        this.labelsMasks = labelsMasks == null ? null : List.copyOf(labelsMasks);
        if (this.features.isEmpty() || this.features.size() != this.labels.size()) {
            throw new IllegalArgumentException("microbatches: features=" + this.features.size() + " labels="
                    + this.labels.size() + " expected the same count, at least 1 (fix: pass one labels array per"
                    + " features array, or cut a batch with Microbatches.split(batch, n, dataType))");
        }
        for (int mb = 0; mb < this.features.size(); mb++) {
            long rows = this.features.get(mb).size(0);
            requireRows("label", this.labels, mb, rows);
            requireRows("features mask", this.featuresMasks, mb, rows);
            requireRows("labels mask", this.labelsMasks, mb, rows);
        }
    }

    /**
     * One batch cut into microbatches, without masks.
     *
     * @param features one array per microbatch, in order
     * @param labels   one array per microbatch, in order, same example counts as {@code features}
     * @throws IllegalArgumentException when the counts of arrays or of examples disagree
     */
    public Microbatches(List<INDArray> features, List<INDArray> labels) {
        this(features, labels, null, null);
    }

    private static void requireRows(String what, List<INDArray> arrays, int mb, long rows) {
        if (arrays == null) {
            return;
        }
        if (arrays.size() <= mb || arrays.get(mb).size(0) != rows) {
            throw new IllegalArgumentException("microbatch " + mb + " has " + rows + " feature rows but "
                    + (arrays.size() <= mb ? "no " + what : arrays.get(mb).size(0) + " " + what + " rows")
                    + ": expected the same example count (fix: give microbatch " + mb + " one " + what + " row per"
                    + " example, or cut a batch with Microbatches.split(batch, n, dataType))");
        }
    }

    /**
     * Cuts {@code batch} into {@code microbatches} parts of equal size, features and labels converted
     * to {@code dataType} (masks keep theirs).
     *
     * @throws IllegalArgumentException when the batch size is not a multiple of {@code microbatches},
     *                                  or features, labels and masks disagree on the example count
     *
     * @param batch        the batch
     * @param microbatches the number of parts, at least 1
     * @param dataType     the network's data type
     * @return the parts, in order
     */
    public static Microbatches split(DataSet batch, int microbatches, DataType dataType) {
        return split(batch, microbatches, dataType, null);
    }

    /**
     * As {@link #split(DataSet, int, DataType)}, written into {@code reuse}'s arrays where they fit (the same count of
     * microbatches, and an array of the same shape and type): a trainer cuts every step's batch into the arrays of
     * the step before, which nothing reads once that step ended, instead of new ones. The values are the same copies
     * either way. Nothing is written before the batch is checked.
     *
     * @param reuse the previous cut whose arrays may be overwritten, or null
     */
    static Microbatches split(DataSet batch, int microbatches, DataType dataType, Microbatches reuse) {
        Objects.requireNonNull(batch, "batch");
        if (microbatches < 1) {
            throw new IllegalArgumentException("microbatches=" + microbatches + " expected microbatches >= 1 (fix: pass"
                    + " 1 for the whole batch, or more to cut it into that many parts)");
        }
        INDArray features = batch.getFeatures();
        INDArray labels = batch.getLabels();
        if (features == null || labels == null) {
            throw new IllegalArgumentException("the batch has features=" + (features == null ? "null" : "set") + " labels="
                    + (labels == null ? "null" : "set") + ": pipeline training needs both (fix: give batches"
                    + " with features and labels)");
        }
        long examples = features.size(0);
        requireExamples("label", labels, examples);
        requireExamples("features mask", batch.getFeaturesMaskArray(), examples);
        requireExamples("labels mask", batch.getLabelsMaskArray(), examples);
        if (examples < microbatches || examples % microbatches != 0) {
            long lower = examples / microbatches * microbatches;
            String sizes = lower == 0 ? String.valueOf(microbatches) : lower + " or " + (lower + microbatches);
            throw new IllegalArgumentException("batch size=" + examples + " is not divisible by microbatches="
                    + microbatches + ": expected a multiple of " + microbatches + " (fix: use batch size " + sizes
                    + ", or a microbatch count that divides " + examples + ")");
        }
        long size = examples / microbatches;
        return new Microbatches(cut(features, microbatches, size, dataType, reuse == null ? null : reuse.features),
                cut(labels, microbatches, size, dataType, reuse == null ? null : reuse.labels),
                cut(batch.getFeaturesMaskArray(), microbatches, size, null, reuse == null ? null : reuse.featuresMasks),
                cut(batch.getLabelsMaskArray(), microbatches, size, null, reuse == null ? null : reuse.labelsMasks));
    }

    /**
     * {@code batch} cut into {@code microbatches x dataParallel} equal pieces, in order, for {@link #replicaShares(
     * Microbatches, int, int, int, int)}; into {@code reuse}'s arrays where they fit (as {@link #split(DataSet, int,
     * DataType, Microbatches)}).
     *
     * @throws IllegalArgumentException when features or labels are missing, or the batch size is not a multiple of
     *                                  {@code microbatches x dataParallel}
     */
    static Microbatches splitForReplicas(DataSet batch, int microbatches, int dataParallel, DataType dataType,
                                         Microbatches reuse) {
        int m = microbatches;
        int pieces = m * dataParallel;
        if (batch.getFeatures() == null || batch.getLabels() == null) {
            throw new IllegalArgumentException("the batch has features=" + (batch.getFeatures() == null ? "null" : "set")
                    + " labels=" + (batch.getLabels() == null ? "null" : "set") + ": pipeline training needs"
                    + " both (fix: give batches with features and labels)");
        }
        long examples = batch.getFeatures().size(0);
        if (examples < pieces || examples % pieces != 0) {
            long lower = examples / pieces * pieces;
            throw new IllegalArgumentException("batch size=" + examples + " is not divisible by microbatches=" + m
                    + " x dataParallel=" + dataParallel + ": expected a multiple of " + pieces + " (every replica trains on"
                    + " an equal share cut into equal microbatches; fix: use batch size "
                    + (lower == 0 ? String.valueOf(pieces) : lower + " or " + (lower + pieces)) + ")");
        }
        return split(batch, pieces, dataType, reuse);
    }

    /**
     * The shares of data-parallel replicas {@code [firstReplica, endReplica)} of a batch cut by
     * {@link #splitForReplicas} into {@code microbatches x dataParallel} equal pieces: replica {@code d}'s microbatch
     * {@code k} is piece {@code k * dataParallel + d}, so the replicas' microbatch {@code k} together are the batch's
     * {@code k}-th {@code 1/microbatches}.
     */
    static List<Microbatches> replicaShares(Microbatches all, int microbatches, int dataParallel, int firstReplica,
                                            int endReplica) {
        int m = microbatches;
        boolean featuresMasks = all.featuresMasks != null;
        boolean labelsMasks = all.labelsMasks != null;
        List<Microbatches> shares = new ArrayList<>(endReplica - firstReplica);
        for (int d = firstReplica; d < endReplica; d++) {
            List<INDArray> features = new ArrayList<>(m);
            List<INDArray> labels = new ArrayList<>(m);
            List<INDArray> featuresMask = featuresMasks ? new ArrayList<>(m) : null;
            List<INDArray> labelsMask = labelsMasks ? new ArrayList<>(m) : null;
            for (int k = 0; k < m; k++) {
                int piece = k * dataParallel + d;
                features.add(all.features().get(piece));
                labels.add(all.labels().get(piece));
                if (featuresMask != null) {
                    featuresMask.add(all.featuresMask(piece));
                }
                if (labelsMask != null) {
                    labelsMask.add(all.labelsMask(piece));
                }
            }
            shares.add(new Microbatches(features, labels, featuresMask, labelsMask));
        }
        return shares;
    }

    private static void requireExamples(String what, INDArray array, long examples) {
        if (array != null && array.size(0) != examples) {
            throw new IllegalArgumentException("the batch has " + examples + " feature rows but " + array.size(0) + " "
                    + what + " rows: expected the same example count (fix: give one label row per example)");
        }
    }

    private static List<INDArray> cut(INDArray array, int parts, long size, DataType type, List<INDArray> reuse) {
        if (array == null) {
            return null;
        }
        List<INDArray> out = new ArrayList<>(parts);
        for (int mb = 0; mb < parts; mb++) {
            INDArray into = reuse != null && reuse.size() == parts ? reuse.get(mb) : null;
            out.add(rows(array, mb * size, size, type == null ? array.dataType() : type, into));
        }
        return out;
    }

    /**
     * One array per microbatch, in order.
     *
     * @return the features, unmodifiable
     */
    public List<INDArray> features() {
        return features;
    }

    /**
     * One array per microbatch, in order.
     *
     * @return the labels, unmodifiable
     */
    public List<INDArray> labels() {
        return labels;
    }

    /**
     * Microbatch {@code mb}'s features mask, or null when the batch has none.
     *
     * @param mb the microbatch, from 0
     * @return the mask, or null
     */
    public INDArray featuresMask(int mb) {
        return featuresMasks == null ? null : featuresMasks.get(mb);
    }

    /**
     * Microbatch {@code mb}'s labels mask, or null when the batch has none.
     *
     * @param mb the microbatch, from 0
     * @return the mask, or null
     */
    public INDArray labelsMask(int mb) {
        return labelsMasks == null ? null : labelsMasks.get(mb);
    }

    /**
     * Whether the batch has a features or labels mask.
     *
     * @return true when either mask is present
     */
    public boolean hasMasks() {
        return featuresMasks != null || labelsMasks != null;
    }

    /**
     * Number of microbatches.
     *
     * @return microbatches, at least 1
     */
    public int count() {
        return features.size();
    }

    /**
     * Examples in microbatch {@code microbatch}.
     *
     * @param microbatch the microbatch, from 0
     * @return its example count
     */
    public long size(int microbatch) {
        return features.get(microbatch).size(0);
    }

    /**
     * Examples over all microbatches: the batch size.
     *
     * @return the batch's example count
     */
    public long examples() {
        long total = 0;
        for (INDArray f : features) {
            total += f.size(0);
        }
        return total;
    }

    /**
     * Rows {@code [from, from + count)} as a contiguous row-major copy of type {@code type}: written into {@code into}
     * (a copy an earlier cut made, so contiguous and row-major) when it has that shape and type, else a new array.
     */
    private static INDArray rows(INDArray array, long from, long count, DataType type, INDArray into) {
        INDArrayIndex[] index = new INDArrayIndex[array.rank()];
        index[0] = NDArrayIndex.interval(from, from + count);
        for (int d = 1; d < index.length; d++) {
            index[d] = NDArrayIndex.all();
        }
        INDArray part = array.get(index);
        if (into != null && into.dataType() == type && java.util.Arrays.equals(into.shape(), part.shape())) {
            // the same values as the copy below: a plain copy when the type matches (no array made), else the cast's
            return into.assign(part.dataType() == type ? part : part.castTo(type));
        }
        // castTo returns the same (view) array when the type already matches: dup makes it ours
        return part.castTo(type).dup('c');
    }

    @Override
    public String toString() {
        return "Microbatches[count=" + count() + ", examples=" + examples() + ", masks=" + hasMasks() + "]";
    }
}
