/**
 * Pipeline parallelism for DL4J: a {@code MultiLayerNetwork} cut into stages of consecutive layers
 * ({@link org.symmem4j.dl4j.pipeline.PipelineStageSplit}), each a
 * {@link org.symmem4j.pipeline.exec.StageCompute} computing with DL4J's own layers
 * ({@link org.symmem4j.dl4j.pipeline.Dl4jPipelineStage}), run by the {@code pipeline} module's executor
 * on threads of one JVM ({@link org.symmem4j.dl4j.pipeline.PipelineParallelTrainer}). One step on a batch
 * equals one {@code fit} of the unsplit network on that batch, to fp32 rounding.
 */
package org.symmem4j.dl4j.pipeline;
