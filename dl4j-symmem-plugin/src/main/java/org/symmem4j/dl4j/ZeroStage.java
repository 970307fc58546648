package org.symmem4j.dl4j;

/**
 * What ZeRO-style sharding splits across the data-parallel workers
 * ({@link SymmemParallelWrapper.Builder#sharding(ZeroStage)}). In both stages each worker keeps
 * updater state (Adam moments, momentum, ...) only for its 1/N shard of the flat parameter vector and
 * runs DL4J's own updater on that shard; in stages 1 and 2 the workers all-gather the resulting
 * update, so every replica applies the same update and stays bitwise identical; in stage 3 no worker
 * holds a whole replica (see {@link #PARAMETERS}).
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
    GRADIENTS,
    /**
     * Stage 3 (fully sharded data parallelism, as PyTorch's FSDP and DeepSpeed's ZeRO-3): each
     * worker holds only its 1/N block of every layer's parameters, gradient and updater state. A
     * layer's parameters are all-gathered into the worker's (sparse) parameter memory just before
     * its forward and again before its backward and released after; its gradient is
     * reduce-scattered as soon as its backward is done; each worker updates and subtracts its own
     * blocks only. Bitwise equal to plain data parallelism and to stages 1 and 2. MultiLayerNetwork
     * and ComputationGraph (BatchNorm's running statistics merged as plain data parallelism merges them)
     * on the host transports (threads, or one JVM per worker on one machine); see
     * docs/zero-stage-3.md for the layout, what is refused and why.
     */
    PARAMETERS
}
