package org.symmem4j.dl4j.pipeline;

import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;

/** A batch as the pipeline's stages take it: a DataSet, or a MultiDataSet of one input and one output. */
final class PipelineBatches {

    private PipelineBatches() {
    }

    /**
     * A batch as the stages take it: a DataSet, or a MultiDataSet of one input and one output.
     *
     * @throws IllegalArgumentException when it is a MultiDataSet of more arrays ({@link #notOneInputOneOutput})
     */
    static DataSet asDataSet(Object batch) {
        if (batch instanceof DataSet ds) {
            return ds;
        }
        MultiDataSet mds = (MultiDataSet) batch;
        if (mds.numFeatureArrays() != 1 || mds.numLabelsArrays() != 1) {
            throw new IllegalArgumentException(notOneInputOneOutput(mds.numFeatureArrays(), mds.numLabelsArrays()));
        }
        return new org.nd4j.linalg.dataset.DataSet(mds.getFeatures(0), mds.getLabels(0), mds.getFeaturesMaskArray(0),
                mds.getLabelsMaskArray(0));
    }

    /** The refusal of a MultiDataSet of {@code features} and {@code labels} arrays ({@link #asDataSet}). */
    static String notOneInputOneOutput(long features, long labels) {
        return "a MultiDataSet with features=" + features + " labels=" + labels + " arrays: expected features=1 labels=1"
                + " (a pipeline trains a graph of one input and one output; fix: train this graph with"
                + " SymmemParallelWrapper instead)";
    }
}
