package org.symmem4j.dl4j;

/**
 * What ZeRO-style sharding splits across the data-parallel workers
 * ({@link SymmemParallelWrapper.Builder#sharding(ZeroStage)}). In both stages each worker keeps
 * updater state (Adam moments, momentum, ...) only for its 1/N shard of the flat parameter vector,
 * runs DL4J's own updater on that shard, and the workers all-gather the resulting update, so every
 * replica applies the same update and stays bitwise identical.
 */
public enum ZeroStage {
    /**
     * Stage 1: the gradient is all-reduced as in plain data parallelism (every worker holds the
     * whole averaged gradient), each worker updates its shard, then the update is all-gathered.
     */
    OPTIMIZER_STATE,
    /**
     * Stage 2: the gradient is reduce-scattered, so each worker only ever computes the averaged
     * gradient of its own shard; then the update is all-gathered. Moves the same bytes as one
     * all-reduce. DL4J's backprop still fills each replica's whole local gradient view, so this
     * saves no gradient memory in DL4J (see README, Known limits).
     */
    GRADIENTS
}
