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
 * One training batch cut into equal microbatches along the example dimension, as contiguous
 * row-major copies: the first stage reads {@code features.get(mb)}, the last {@code labels.get(mb)}.
 *
 * @param features one array per microbatch, in order
 * @param labels   one array per microbatch, in order, same example counts as {@code features}
 */
public record Microbatches(List<INDArray> features, List<INDArray> labels) {

    public Microbatches {
        features = List.copyOf(features);
        labels = List.copyOf(labels);
        if (features.isEmpty() || features.size() != labels.size()) {
            throw new IllegalArgumentException("microbatches: features=" + features.size() + " labels=" + labels.size()
                    + " expected the same count, at least 1");
        }
        for (int mb = 0; mb < features.size(); mb++) {
            if (features.get(mb).size(0) != labels.get(mb).size(0)) {
                throw new IllegalArgumentException("microbatch " + mb + " has " + features.get(mb).size(0)
                        + " feature rows expected=" + labels.get(mb).size(0) + " (its label rows)");
            }
        }
    }

    /**
     * Cuts {@code batch} into {@code microbatches} parts of equal size, converted to {@code dataType}.
     *
     * @throws IllegalArgumentException when the batch size is not a multiple of {@code microbatches},
     *                                  features and labels disagree on the example count, or the batch
     *                                  has masks (not supported by pipeline stages)
     */
    public static Microbatches split(DataSet batch, int microbatches, DataType dataType) {
        Objects.requireNonNull(batch, "batch");
        if (microbatches < 1) {
            throw new IllegalArgumentException("microbatches=" + microbatches + " expected microbatches >= 1");
        }
        INDArray features = batch.getFeatures();
        INDArray labels = batch.getLabels();
        if (features == null || labels == null) {
            throw new IllegalArgumentException("the batch has features=" + (features == null ? "null" : "set") + " labels="
                    + (labels == null ? "null" : "set") + ": pipeline training needs both");
        }
        if (batch.getFeaturesMaskArray() != null || batch.getLabelsMaskArray() != null) {
            throw new IllegalArgumentException("the batch has a " + (batch.getFeaturesMaskArray() != null ? "features" : "labels")
                    + " mask: expected no masks (pipeline stages of dense layers do not support masking; drop the"
                    + " masks or train without the pipeline)");
        }
        long examples = features.size(0);
        if (labels.size(0) != examples) {
            throw new IllegalArgumentException("the batch has " + examples + " feature rows but " + labels.size(0)
                    + " label rows: expected the same example count");
        }
        if (examples < microbatches || examples % microbatches != 0) {
            long lower = examples / microbatches * microbatches;
            String sizes = lower == 0 ? String.valueOf(microbatches) : lower + " or " + (lower + microbatches);
            throw new IllegalArgumentException("batch size=" + examples + " is not divisible by microbatches="
                    + microbatches + ": expected a multiple of " + microbatches + " (use batch size " + sizes
                    + ", or a microbatch count that divides " + examples + ")");
        }
        long size = examples / microbatches;
        List<INDArray> featureParts = new ArrayList<>(microbatches);
        List<INDArray> labelParts = new ArrayList<>(microbatches);
        for (int mb = 0; mb < microbatches; mb++) {
            featureParts.add(rows(features, mb * size, size, dataType));
            labelParts.add(rows(labels, mb * size, size, dataType));
        }
        return new Microbatches(featureParts, labelParts);
    }

    /** Number of microbatches. */
    public int count() {
        return features.size();
    }

    /** Examples in microbatch {@code microbatch}. */
    public long size(int microbatch) {
        return features.get(microbatch).size(0);
    }

    /** Examples over all microbatches: the batch size. */
    public long examples() {
        long total = 0;
        for (INDArray f : features) {
            total += f.size(0);
        }
        return total;
    }

    /** Rows {@code [from, from + count)} as a contiguous row-major copy of type {@code type}. */
    private static INDArray rows(INDArray array, long from, long count, DataType type) {
        INDArrayIndex[] index = new INDArrayIndex[array.rank()];
        index[0] = NDArrayIndex.interval(from, from + count);
        for (int d = 1; d < index.length; d++) {
            index[d] = NDArrayIndex.all();
        }
        INDArray part = array.get(index);
        // castTo returns the same (view) array when the type already matches: dup makes it ours
        return part.castTo(type).dup('c');
    }
}
