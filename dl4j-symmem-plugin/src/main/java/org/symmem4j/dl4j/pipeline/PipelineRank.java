package org.symmem4j.dl4j.pipeline;

import java.util.Map;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;
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
 * {@link DeviceMesh} (world rank {@code d * pp + p} is pipeline rank {@code p} of replica {@code d}):
 * the executor runs on the rank's {@code pp} sub-group, and its stages share their gradients with the
 * other replicas over its {@code dp} sub-group ({@link ArrayCollectives} on its communicator).
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
     * schedule, and the messages per link.
     */
    record Spec(int replicas, Schedule schedule, PipelineShape shape, int slots, Map<Integer, Dl4jPipelineStage> stages) {
        Spec {
            stages = Map.copyOf(stages);
        }
    }

    private final Group world;
    private final Spec spec;
    private final DeviceMesh mesh;
    /** The communicator over this stage's replicas (the {@code dp} sub-group), or null without replicas. */
    private final Communicator dataParallel;
    private final Group pipelineGroup;
    private PipelineExecutor executor;

    private PipelineRank(Group world, Spec spec, DeviceMesh mesh, Communicator dataParallel) {
        this.world = world;
        this.spec = spec;
        this.mesh = mesh;
        this.dataParallel = dataParallel;
        this.pipelineGroup = mesh == null ? world : mesh.group("pp");
    }

    /**
     * Rank {@code world.rank()} of a {@code replicas x shape.ranks()} world, running {@code spec}'s stages.
     * Collective over {@code world} when {@code replicas > 1} (the mesh's split).
     */
    static PipelineRank open(Group world, Spec spec) {
        if (spec.replicas() == 1) {
            return new PipelineRank(world, spec, null, null);
        }
        DeviceMesh mesh = DeviceMesh.of(world, "dp", spec.replicas(), "pp", spec.shape().ranks());
        Communicator dataParallel = null;
        try {
            dataParallel = Communicator.create(mesh.group("dp"));
            ArrayCollectives replicaSums = new ArrayCollectives(dataParallel);
            for (Dl4jPipelineStage stage : spec.stages().values()) {
                stage.dataParallel(replicaSums);
            }
            return new PipelineRank(world, spec, mesh, dataParallel);
        } catch (RuntimeException | Error e) {
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
            if (spec.replicas() > 1) {
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
        RankRuntime.closeQuietly(dataParallel);
        RankRuntime.closeQuietly(mesh);
    }
}
