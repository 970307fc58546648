/**
 * Pipeline parallelism for DL4J: a {@code MultiLayerNetwork} (or a {@code ComputationGraph} whose
 * vertices form a chain, {@link org.symmem4j.dl4j.pipeline.GraphChain}, or with residual blocks cut at cut
 * vertices, {@link org.symmem4j.dl4j.pipeline.GraphWiring}) cut into stages of consecutive
 * layers ({@link org.symmem4j.dl4j.pipeline.PipelineStageSplit}, by parameters or by measured pass
 * times, {@link org.symmem4j.dl4j.pipeline.StageProfile}), each a
 * {@link org.symmem4j.pipeline.exec.StageCompute} computing with DL4J's own layers
 * ({@link org.symmem4j.dl4j.pipeline.Dl4jPipelineStage}), run by the {@code pipeline} module's executor
 * on threads of one JVM or one rank per process ({@link org.symmem4j.dl4j.pipeline.PipelineParallelTrainer}, built
 * by {@link org.symmem4j.dl4j.pipeline.PipelineParallelTrainerBuilder}), with the data-parallel wrapper's user
 * contract: the model holds the trained state after every {@code fit}
 * ({@link org.symmem4j.dl4j.pipeline.PipelineModel}), DL4J's listeners, checkpoints with a shard per stage
 * ({@link org.symmem4j.dl4j.pipeline.PipelineCheckpoints}). One step on a batch
 * equals one {@code fit} of the unsplit network on that batch, to rounding; batch normalization and
 * dropout are defined per microbatch ({@link org.symmem4j.dl4j.pipeline.BatchNormRunningStats},
 * {@link org.symmem4j.dl4j.pipeline.MicrobatchDropout}).
 */
package org.symmem4j.dl4j.pipeline;
