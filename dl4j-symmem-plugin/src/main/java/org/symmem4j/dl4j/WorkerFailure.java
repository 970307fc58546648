package org.symmem4j.dl4j;

/**
 * What the data-parallel wrapper does when one of its workers fails during a step
 * ({@link SymmemParallelWrapper.Builder#onWorkerFailure}).
 */
public enum WorkerFailure {
    /**
     * The default: {@code fit()} throws {@link DataParallelTrainingException} naming the worker and step, the model is
     * left as it was before that call, and the caller may call {@code fit()} again. Recovery by restart builds on it:
     * with {@code checkpointEvery(k, dir).resumeFrom(dir)} under {@code symmem4j-run --max-restarts N} the launcher
     * starts the job again and the wrapper resumes from the newest complete checkpoint (RESTART).
     */
    FAIL,
    /**
     * In-place shrink: the workers that survive agree on the state of the last step every one of them completed,
     * a new group of the survivors is formed (new symmetric memory; the old group's is released), the failed step is
     * redone on the survivors and training goes on with fewer workers, inside the same {@code fit()}, until fewer than
     * {@code minWorkers} are left (then {@code fit()} throws as with {@link #FAIL}). From the failed step on the result
     * is bitwise that of plain data parallelism on the survivors over the same batches. With ZeRO sharding the
     * survivors go back to the newest periodic checkpoint instead, re-sliced onto them, and redo the steps since it. See
     * {@link SymmemParallelWrapper.Builder#onWorkerFailure} for the data order and what it cannot do yet.
     */
    SHRINK
}
