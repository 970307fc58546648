package org.symmem4j.dl4j;

import java.util.List;

/**
 * One worker's batches of one optimizer step with gradient accumulation: their gradients are summed
 * before the step's single sync (DataSets or MultiDataSets, at least one).
 */
record MicroBatches(List<Object> batches) {
    MicroBatches {
        if (batches.isEmpty()) {
            throw new IllegalArgumentException("a worker's micro-batches must hold at least one batch");
        }
        batches = List.copyOf(batches);
    }
}
