package org.symmem4j.dl4j.pipeline;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.layers.normalization.BatchNormalization;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.dl4j.SyncBatchNorm;
import org.symmem4j.parallel.Group;
import org.symmem4j.pipeline.schedule.Action;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;

/**
 * Synchronized BatchNorm on the pipeline's data-parallel axis ({@link PipelineParallelTrainerBuilder#syncBatchNorm}):
 * the stages' BatchNormalization layers become the wrapper's {@link org.symmem4j.dl4j.SyncBatchNormLayer}, whose
 * statistics are all-reduced over the stage's {@code dp} sub-group (the ranks holding the same stages), once per
 * microbatch pass, through a {@link org.symmem4j.parallel.Communicator} on that sub-group ({@link SyncBatchNorm}).
 *
 * <p><b>Why the all-reduces meet.</b> A layer's collectives are matched by order on its communicator: the k-th
 * all-reduce of one replica meets the k-th of the others. Every replica of a pipeline rank runs the same action list
 * (the trainer's one {@link Schedule}, in its order: the executor interprets it strictly in sequence), so the
 * replicas run forward and backward of the same stage and microbatch at the same position, and their BatchNorm
 * all-reduces pair up microbatch by microbatch: replica {@code d}'s microbatch {@code k} merges with the other
 * replicas' microbatch {@code k}, which together are the batch's {@code k}-th {@code 1/microbatches}. The backward pass
 * of a stage re-runs the forward of its BatchNormalization layers first (they keep the last pass's normalization:
 * {@link LayerSupport}); every replica does so at the same action, so those all-reduces pair up too and give the same
 * merged statistics. {@link #requireSameOrder} checks this at {@code build()} for the schedules the replicas run and
 * refuses any schedule under which two replicas would run a stage's actions in different orders.
 *
 * <p><b>Running statistics.</b> Each microbatch updates them once, from the merged microbatch's mean and variance
 * (every replica the same values), in microbatch order ({@link BatchNormRunningStats}), instead of once per replica's
 * piece. One step therefore equals one pipeline step with {@code microbatches} microbatches on the whole batch, the
 * replicas' microbatch {@code k} together making microbatch {@code k}.
 */
final class PipelineSyncBatchNorm {

    private PipelineSyncBatchNorm() {
    }

    /**
     * At {@code build()}: the network has BatchNormalization layers that can be synchronized, there are replicas to
     * synchronize with, and the replicas run every stage's actions in the same order.
     *
     * @param network      the network to train (a graph: its chain network)
     * @param dataParallel the replicas of every stage
     * @param schedule     the schedule every replica runs
     * @param shape        the pipeline's shape
     * @param tensorParallel the tensor-parallel ranks per pipeline rank (1: none)
     * @throws IllegalArgumentException naming what cannot be synchronized, and the fix
     */
    static void check(MultiLayerNetwork network, int dataParallel, int tensorParallel, Schedule schedule,
                      PipelineShape shape) {
        if (tensorParallel > 1) {
            // the stage's ranks would be dp x tp: a BatchNorm's statistics would have to merge over the replicas of
            // one tensor-parallel rank only (its dp sub-group of the mesh), which is not built nor tested
            throw new IllegalArgumentException("syncBatchNorm(true) with tensorParallel=" + tensorParallel + ": expected"
                    + " tensorParallel=1; synchronized BatchNorm on the pipeline is built for dp x pp only, not for"
                    + " tensor-parallel stages (fix: drop tensorParallel, or drop syncBatchNorm)");
        }
        if (dataParallel < 2) {
            throw new IllegalArgumentException("syncBatchNorm(true) with dataParallel=" + dataParallel + ": expected"
                    + " dataParallel >= 2, replicas whose microbatches the statistics merge; with one replica each"
                    + " microbatch is normalized with its own statistics already (fix: dataParallel(n) with n >= 2, or"
                    + " drop syncBatchNorm)");
        }
        List<org.deeplearning4j.nn.conf.layers.Layer> confs = new ArrayList<>();
        for (NeuralNetConfiguration c : network.getLayerWiseConfigurations().getConfs()) {
            confs.add(c.getLayer());
        }
        SyncBatchNorm.check(confs);
        List<Schedule> replicas = new ArrayList<>(dataParallel);
        for (int d = 0; d < dataParallel; d++) {
            replicas.add(schedule); // the trainer gives every replica the one schedule it generated
        }
        requireSameOrder(replicas, shape);
    }

    /**
     * The replicas' BatchNorm all-reduces meet microbatch by microbatch only if every replica runs each pipeline
     * rank's actions in the same order: {@code replicas.get(d)} is the schedule replica {@code d} runs.
     *
     * @throws IllegalArgumentException naming the pipeline rank, the replica and the first action where the order
     *         differs
     */
    static void requireSameOrder(List<Schedule> replicas, PipelineShape shape) {
        Schedule first = replicas.getFirst();
        for (int d = 1; d < replicas.size(); d++) {
            for (int p = 0; p < shape.ranks(); p++) {
                List<Action> expected = first.actions(p);
                List<Action> found = replicas.get(d).actions(p);
                int n = Math.min(expected.size(), found.size());
                int at = 0;
                while (at < n && expected.get(at).equals(found.get(at))) {
                    at++;
                }
                if (at < n || expected.size() != found.size()) {
                    throw new IllegalArgumentException("syncBatchNorm(true): pipeline rank " + p + " of replica " + d
                            + " runs its actions in another order than replica 0's: at position " + at + " expected "
                            + (at < expected.size() ? expected.get(at) : "the end") + ", found "
                            + (at < found.size() ? found.get(at) : "the end") + "; a synchronized BatchNorm all-reduces"
                            + " each microbatch's statistics over the replicas in the order their actions run, so the"
                            + " replicas' microbatches would be merged out of step (fix: give every replica the same"
                            + " schedule, or drop syncBatchNorm)");
                }
            }
        }
    }

    /**
     * On the rank's thread, collectively over {@code dataParallel} (every rank of it holds the same stages): swaps the
     * BatchNormalization layers of this rank's {@code stages}, in stage order, for synchronized ones over one
     * communicator on that sub-group.
     *
     * @return the rank's side, to close collectively when the rank stops; null when these stages have no
     *         BatchNormalization layer (nor do the other replicas' copies of them: nothing to synchronize)
     */
    static SyncBatchNorm install(Collection<Dl4jPipelineStage> stages, Group dataParallel) {
        List<Dl4jPipelineStage> ordered = new ArrayList<>(stages);
        // the same order on every replica (the map the stages come from iterates in a per-JVM order)
        ordered.sort(Comparator.comparingInt(Dl4jPipelineStage::stage));
        List<MultiLayerNetwork> networks = new ArrayList<>();
        for (Dl4jPipelineStage stage : ordered) {
            for (org.deeplearning4j.nn.api.Layer layer : stage.network().getLayers()) {
                if (layer instanceof BatchNormalization) {
                    networks.add(stage.network());
                    break;
                }
            }
        }
        if (networks.isEmpty()) {
            return null;
        }
        SyncBatchNorm sync = SyncBatchNorm.install(networks, dataParallel);
        for (Dl4jPipelineStage stage : ordered) {
            stage.batchNormLayersSwapped();
        }
        return sync;
    }
}
