/**
 * Runnable examples of symmem4j, each a {@code main} on generated data (no downloads): DL4J data parallelism
 * ({@link org.symmem4j.examples.DataParallelExample}, the README's first command), pipeline parallelism of a dense
 * and a convolutional network, host all-reduce with every algorithm, a user's own CUDA kernel on symmetric
 * memory, and the shared-state structures without DL4J ({@link org.symmem4j.examples.RingBufferExample},
 * {@link org.symmem4j.examples.SharedHashMapExample}, {@link org.symmem4j.examples.ParameterCacheExample},
 * {@link org.symmem4j.examples.DistributedTensorExample}, and {@link org.symmem4j.examples.ParameterServerExample},
 * which combines three of them); with the command-line helper ({@link org.symmem4j.examples.Cli}) the benchmarks share.
 *
 * <p>Layer: a user of the library: may use every product module's public API (and DL4J), never their internals.
 */
package org.symmem4j.examples;
