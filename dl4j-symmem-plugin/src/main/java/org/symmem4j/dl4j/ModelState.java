package org.symmem4j.dl4j;

import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * Parameters, updater state (the whole of it: the model holds the gathered state between fits, with sharding too),
 * counters and score of the wrapper's model: put back after a failed fit, and the state a ZeRO shrink goes back to when
 * no checkpoint was taken yet in the fit ({@link ShardedShrink}).
 */
record ModelState(INDArray params, INDArray updaterState, int iterations, int epochs, double score) {

    /** {@return a copy of {@code model}'s state} */
    static ModelState of(ModelReplica model) {
        INDArray state = model.updaterState();
        return new ModelState(model.params().dup(), state == null ? null : state.dup(), model.iterationCount(),
                model.epochCount(), model.score());
    }

    /** {@code model} takes this state; the copy stays as it is (it can be restored again). */
    void restore(ModelReplica model) {
        model.params().assign(params);
        if (updaterState != null) {
            model.updaterState().assign(updaterState);
        }
        model.setIterationCount(iterations);
        model.setEpochCount(epochs);
        model.setScore(score);
    }
}
