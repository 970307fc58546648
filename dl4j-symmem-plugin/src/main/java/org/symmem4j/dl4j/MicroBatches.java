package org.symmem4j.dl4j;

import java.util.List;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.symmem4j.parallel.Invariants;

/**
 * One worker's batches of one optimizer step with gradient accumulation: their gradients are summed
 * before the step's single sync (DataSets or MultiDataSets, at least one).
 */
record MicroBatches(List<Object> batches) {
    MicroBatches {
        if (batches.isEmpty()) {
            throw Invariants.violated("a worker's micro-batches must hold at least one batch");
        }
        batches = List.copyOf(batches);
    }

    /**
     * The examples of a worker's share of a step.
     *
     * @param batch a {@code DataSet}, a {@code MultiDataSet}, or {@code MicroBatches} of them (summed)
     * @return its example count
     */
    static long examples(Object batch) {
        if (batch instanceof MicroBatches micro) {
            return micro.batches().stream().mapToLong(MicroBatches::examples).sum();
        }
        if (batch instanceof DataSet ds) {
            return ds.numExamples();
        }
        MultiDataSet mds = (MultiDataSet) batch;
        return mds.getFeatures(0).size(0);
    }
}
