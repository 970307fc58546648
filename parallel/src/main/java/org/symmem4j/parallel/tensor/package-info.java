/**
 * Tensor parallelism on GPUs: {@link org.symmem4j.parallel.tensor.TensorParallelMlp}, Megatron's MLP block
 * (column-parallel → ReLU → row-parallel, with sequence parallelism) on the
 * {@link org.symmem4j.parallel.TensorParallelGemm} of a GPU communicator — forward, backward, gradients for
 * data-parallel synchronization, and an SGD step. The DL4J layers are in the plugin
 * ({@code org.symmem4j.dl4j.tensor}).
 */
package org.symmem4j.parallel.tensor;
