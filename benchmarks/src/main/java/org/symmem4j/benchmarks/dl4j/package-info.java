/**
 * DL4J benchmarks: data parallelism against one model and DL4J's ParallelWrapper, scaling over workers,
 * process mode, ZeRO sharding, pipeline parallelism, each with its report writer.
 *
 * <p>Layer: uses the plugin's public API, DL4J, and the shared helpers of {@link org.symmem4j.benchmarks}.
 */
package org.symmem4j.benchmarks.dl4j;
