/**
 * Everything that imports Deeplearning4j.
 *
 * <ul>
 *   <li>{@link org.symmem4j.dl4j.SymmemParallelWrapper}: the one-builder-call replacement for DL4J's
 *       {@code ParallelWrapper} that averages raw gradients over symmetric memory before each
 *       replica's updater (exact, with BatchNorm's running statistics, the user's listeners, buckets,
 *       overlap, gradient accumulation, bf16 transfer, ZeRO stages 1, 2 and 3), and its GPU mode for DL4J's CUDA
 *       backend on Ampere/Ada GPUs: gradients summed in place on ND4J's device buffers, on ND4J's stream
 *       ({@link org.symmem4j.dl4j.nd4j.Nd4jDeviceGradients}; not run on a GPU in this project).</li>
 *   <li>{@link org.symmem4j.dl4j.SymmemGradientsAccumulator}: the same exact all-reduce inside DL4J's
 *       own {@code ParallelWrapper}, as the accumulator of its CUSTOM training mode: two added lines
 *       in existing ParallelWrapper code; works around ParallelWrapper's second-fit deadlock, its reset
 *       of the user's updater and its overwriting of the workspace mode.</li>
 *   <li>Serving the sync metrics to Prometheus: {@code PrometheusEndpoint}, in the module
 *       {@code symmem4j-prometheus} (package {@code org.symmem4j.prometheus}).</li>
 *   <li>Pipeline parallelism: {@link org.symmem4j.dl4j.pipeline.PipelineParallelTrainer}.</li>
 * </ul>
 *
 * <p>{@code deeplearning4j-parallel-wrapper} is an optional dependency: only
 * {@code SymmemGradientsAccumulator} needs it, and its users already have it.
 */
package org.symmem4j.dl4j;
