/**
 * Everything that imports Deeplearning4j (planned; see the DL4J data-parallelism, pipeline and
 * ZeRO issues): the one-builder-call replacement for {@code ParallelWrapper} that averages raw
 * gradients over symmetric memory before each replica's updater, pipeline stages cut from a
 * {@code MultiLayerNetwork}, the sharded updater, tensor-parallel layers and the Prometheus
 * endpoint wiring. Pipeline parallelism: {@link org.symmem4j.dl4j.pipeline.PipelineParallelTrainer}.
 */
package org.symmem4j.dl4j;
