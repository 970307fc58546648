package org.symmem4j.dl4j.pipeline;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.symmem4j.dl4j.SyncBatchNorm;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.pipeline.exec.PipelineExecutor;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;

/**
 * One pipeline rank's resources on its group, whoever drives it: a thread of the trainer's in-JVM
 * world ({@link PipelineRankWorker}) or the caller's thread in group mode (one process per rank).
 *
 * <p>With data-parallel replicas ({@code replicas > 1}) the world is a {@code dp x pp}
 * {@link DeviceMesh} (world rank {@code d * pp + p} is pipeline rank {@code p} of replica {@code d}; with
 * tensor-parallel shards a {@code dp x pp x tp} mesh, world rank {@code (d * pp + p) * tp + t}, whose stages' blocks
 * are attached to a communicator over the rank's {@code tp} sub-group, {@link PipelineTensorParallel}):
 * the executor runs on the rank's {@code pp} sub-group, and its stages share their gradients with the
 * other replicas over its {@code dp} sub-group ({@link ArrayCollectives} on its communicator); with
 * {@link Spec#syncBatchNorm()} its BatchNormalization layers merge their statistics over that sub-group too
 * ({@link PipelineSyncBatchNorm}, a communicator of their own).
 *
 * <p>The executor's links are sized for the largest message they carry, which depends on the
 * microbatch size; a step whose messages are larger than the links' slots recreates the executor
 * (collective: every rank is given the same slot size, so all of them do).
 *
 * <p>Used by one thread at a time. {@link #close()} frees what this class created (executor, the
 * data-parallel communicator, the mesh's sub-groups), never the world group it was given.
 */
final class PipelineRank implements AutoCloseable {

    /**
     * What one rank runs: its stages (stage index to stage) in a {@code replicas x shape.ranks()} world, the
     * schedule, the messages per link, and whether its BatchNormalization layers synchronize over the replicas
     * ({@link PipelineSyncBatchNorm}).
     */
    record Spec(int replicas, int tensorParallel, Schedule schedule, PipelineShape shape, int slots,
                Map<Integer, Dl4jPipelineStage> stages, boolean syncBatchNorm) {
        Spec {
            stages = Map.copyOf(stages);
        }

        /**
         * What world rank {@code rank} runs, of its replica's (its tensor-parallel shard's) stages {@code replica}: world
         * rank {@code (d * pp + p) * tp + t} is pipeline rank {@code p}, which runs stages {@code p}, {@code p + pp}, ...
         */
        static Spec ofRank(int rank, List<Dl4jPipelineStage> replica, int replicas, int tensorParallel, Schedule schedule,
                           PipelineShape shape, int slots, boolean syncBatchNorm) {
            int pp = shape.ranks();
            int p = rank / tensorParallel % pp;
            Map<Integer, Dl4jPipelineStage> mine = new HashMap<>();
            for (int s = p; s < replica.size(); s += pp) {
                mine.put(s, replica.get(s));
            }
            return new Spec(replicas, tensorParallel, schedule, shape, slots, mine, syncBatchNorm);
        }

        /** Whether the rank's world is a mesh (data-parallel replicas, or tensor-parallel shards), not one pipeline. */
        boolean meshed() {
            return replicas > 1 || tensorParallel > 1;
        }
    }

    private final Group world;
    private final Spec spec;
    private final DeviceMesh mesh;
    /** The communicator over this stage's replicas (the {@code dp} sub-group), or null without replicas. */
    private final Communicator dataParallel;
    /** The synchronized BatchNorm layers' collectives over the {@code dp} sub-group, or null. */
    private final SyncBatchNorm batchNorm;
    /** The communicator of the stages' tensor-parallel layers (the {@code tp} sub-group), or null without them. */
    private final Communicator tensorParallel;
    private final Group pipelineGroup;
    private PipelineExecutor executor;

    private PipelineRank(Group world, Spec spec, DeviceMesh mesh, Communicator dataParallel, SyncBatchNorm batchNorm,
                         Communicator tensorParallel) {
        this.world = world;
        this.spec = spec;
        this.mesh = mesh;
        this.dataParallel = dataParallel;
        this.batchNorm = batchNorm;
        this.tensorParallel = tensorParallel;
        this.pipelineGroup = mesh == null ? world : mesh.group("pp");
    }

    /**
     * Rank {@code world.rank()} of a {@code replicas x shape.ranks()} world, running {@code spec}'s stages.
     * Collective over {@code world} when {@code replicas > 1} (the mesh's split).
     */
    static PipelineRank open(Group world, Spec spec) {
        if (!spec.meshed()) {
            return new PipelineRank(world, spec, null, null, null, null);
        }
        DeviceMesh mesh = spec.tensorParallel() == 1
                ? DeviceMesh.of(world, "dp", spec.replicas(), "pp", spec.shape().ranks())
                : DeviceMesh.of(world, "dp", spec.replicas(), "pp", spec.shape().ranks(), "tp", spec.tensorParallel());
        Communicator dataParallel = null;
        SyncBatchNorm batchNorm = null;
        Communicator tensorParallel = null;
        try {
            if (spec.replicas() > 1) {
                // the dp sub-group's ranks hold the same shard of the same stages: their gradients are summed
                dataParallel = Communicator.create(mesh.group("dp"));
                ArrayCollectives replicaSums = new ArrayCollectives(dataParallel);
                for (Dl4jPipelineStage stage : spec.stages().values()) {
                    stage.dataParallel(replicaSums);
                }
                if (spec.syncBatchNorm()) {
                    // collective over the dp sub-group, whose ranks hold the same stages
                    batchNorm = PipelineSyncBatchNorm.install(spec.stages().values(), mesh.group("dp"));
                }
            }
            if (spec.tensorParallel() > 1) {
                // the tp sub-group's ranks hold the shards of the same stages: the blocks' all-reduces run over it
                tensorParallel = Communicator.create(mesh.group("tp"));
                for (Dl4jPipelineStage stage : spec.stages().values()) {
                    TensorParallel.attach(stage.network(), tensorParallel);
                }
            }
            return new PipelineRank(world, spec, mesh, dataParallel, batchNorm, tensorParallel);
        } catch (RuntimeException | Error e) {
            RankRuntime.closeQuietly(tensorParallel);
            RankRuntime.closeQuietly(batchNorm);
            RankRuntime.closeQuietly(dataParallel);
            RankRuntime.closeQuietly(mesh);
            throw e;
        }
    }

    /**
     * Runs one step of {@code plan} on this rank's stages; collective over the pipeline group (and the
     * replicas' groups). On failure with replicas, aborts the world group first: the other replicas wait
     * for this one in their gradient all-reduce, and the world's abort reaches them through every dp
     * sub-group's pads ({@code Group.split}), so they fail at once.
     */
    StepTimeline step(StepPlan plan, long slotBytes) {
        try {
            if (executor == null || executor.layout().slotBytes() < slotBytes) {
                if (executor != null) {
                    executor.close();
                    executor = null;
                }
                executor = PipelineExecutor.create(pipelineGroup, spec.schedule(), spec.shape(), spec.stages(), spec.slots(),
                        slotBytes);
            }
            for (Dl4jPipelineStage stage : spec.stages().values()) {
                stage.beginStep(plan);
            }
            return executor.runStep();
        } catch (RuntimeException | Error e) {
            if (spec.meshed()) {
                world.abort("pipeline step failed on world rank " + world.rank() + ": " + e);
            }
            throw e;
        }
    }

    /** Frees the executor, then the sub-groups' resources, then the sub-groups; idempotent, never throws. */
    @Override
    public void close() {
        RankRuntime.closeQuietly(executor);
        executor = null;
        RankRuntime.closeQuietly(tensorParallel);
        RankRuntime.closeQuietly(batchNorm);
        for (Dl4jPipelineStage stage : spec.stages().values()) {
            RankRuntime.closeQuietly(stage::closeOptimizerShard); // collective over dp, the stages in the same order
        }
        RankRuntime.closeQuietly(dataParallel);
        RankRuntime.closeQuietly(mesh);
    }
}
