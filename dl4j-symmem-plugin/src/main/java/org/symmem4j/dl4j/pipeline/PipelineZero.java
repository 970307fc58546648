package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.Layer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.dl4j.OptimizerStateShard;
import org.symmem4j.dl4j.ZeroStage;

/**
 * ZeRO on the pipeline's data-parallel axis ({@link PipelineParallelTrainerBuilder#sharding}): stage 1
 * ({@link ZeroStage#OPTIMIZER_STATE}), each dp replica of a stage keeping the updater state of its 1/dp block of the
 * stage's parameters ({@link OptimizerStateShard}, installed by each stage at its first step). This class holds what
 * is refused at build() and the hand-over of the whole state: the model takes (and gives) the stages' whole updater
 * state, so around those copies each stage's shards are gathered into DL4J's updater of the replicas concerned
 * ({@link #withWholeState}) and taken back afterwards.
 */
final class PipelineZero {

    private PipelineZero() {
    }

    /**
     * Refuses at build() what pipeline sharding does not build: stages 2 and 3, one replica, group mode, tensor
     * parallelism, the trainer's checkpoints and BatchNorm layers.
     *
     * @param other the other setting in the way ("group mode", "checkpointEvery(...)", ...), or null
     */
    static void check(ZeroStage stage, int dataParallel, int tensorParallel, String other, MultiLayerNetwork network) {
        if (stage == null) {
            return;
        }
        if (stage != ZeroStage.OPTIMIZER_STATE) {
            throw new IllegalArgumentException("sharding(" + stage + ") on the pipeline trainer: not built; expected"
                    + " OPTIMIZER_STATE (ZeRO stage 1: each dp replica of a stage holds 1/dp of its updater state)"
                    + " (fix: sharding(ZeroStage.OPTIMIZER_STATE), or drop sharding(...); stages 2 and 3 are the"
                    + " wrapper's, SymmemParallelWrapper)");
        }
        if (dataParallel < 2) {
            throw new IllegalArgumentException("sharding(" + stage + ") with dataParallel=" + dataParallel
                    + ": expected dataParallel >= 2 (the updater state is cut over a stage's dp replicas)"
                    + " (fix: dataParallel(2) or more, or drop sharding(...))");
        }
        if (tensorParallel > 1) {
            throw new IllegalArgumentException("sharding(" + stage + ") with tensorParallel(" + tensorParallel
                    + ", ...): not built yet; expected a pipeline without tensor parallelism"
                    + " (fix: drop sharding(...), or drop tensorParallel)");
        }
        if (other != null) {
            throw new IllegalArgumentException("sharding(" + stage + ") with " + other + ": not built yet (thread mode,"
                    + " without the trainer's checkpoints, is); expected neither"
                    + " (fix: drop sharding(...), or drop " + other
                    + "; after fit the model given to the builder holds the whole network and its whole updater state:"
                    + " save it with ModelSerializer.writeModel(model, file, true))");
        }
        List<Layer> layers = network.getLayerWiseConfigurations().getConfs().stream().map(c -> c.getLayer()).toList();
        for (int i = 0; i < layers.size(); i++) {
            if (layers.get(i) instanceof BatchNormalization) {
                throw new IllegalArgumentException("sharding(" + stage + ") with a BatchNormalization layer (layer " + i
                        + "): not built yet (its running statistics are updates, not gradients, which DL4J's updater"
                        + " leaves undivided); expected a network without BatchNormalization"
                        + " (fix: drop sharding(...), or remove the layer)");
            }
        }
    }

    /**
     * Runs {@code action} while the stages of {@code whole} hold DL4J's updater with the whole updater state, gathered
     * from every replica's shard of the same stage in {@code all}; afterwards each takes its block back (of the state
     * {@code action} may have replaced) and drops the whole state. Stages not sharded yet (before the first step) hold
     * DL4J's updater anyway. Thread mode; every replica idle.
     *
     * @param all    every replica's stages, in dp rank order
     * @param whole  the replicas whose stages {@code action} reads or writes whole
     * @param action the hand-over
     */
    static void withWholeState(List<List<Dl4jPipelineStage>> all, List<List<Dl4jPipelineStage>> whole,
                               Runnable action) {
        int stages = all.getFirst().size();
        List<OptimizerStateShard> gathered = new ArrayList<>();
        try {
            for (int s = 0; s < stages; s++) {
                int stage = s;
                List<OptimizerStateShard> shards = all.stream().map(r -> r.get(stage).optimizerShard()).toList();
                if (shards.contains(null)) {
                    continue; // not sharded yet: DL4J's updater holds the whole state
                }
                List<OptimizerStateShard> mine = whole.stream().map(r -> r.get(stage).optimizerShard()).toList();
                OptimizerStateShard.materialize(mine, shards);
                gathered.addAll(mine);
            }
            action.run();
        } finally {
            for (OptimizerStateShard s : gathered) {
                s.shardAgain();
            }
        }
    }
}
