/**
 * Tensor parallelism for DL4J on the host: Megatron's column- and row-parallel dense layers
 * ({@link org.symmem4j.dl4j.tensor.ColumnParallelDenseLayer}, {@link org.symmem4j.dl4j.tensor.RowParallelDenseLayer}),
 * {@link org.symmem4j.dl4j.tensor.TensorParallel} to shard an unsharded network onto a tensor-parallel
 * group, attach the group's communicator, and gather the result back into an unsharded network.
 */
package org.symmem4j.dl4j.tensor;
