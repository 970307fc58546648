package org.symmem4j.dl4j.pipeline;

import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.pipeline.exec.PipelineExecutor;
import org.symmem4j.pipeline.exec.StageCompute;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;

/**
 * One pipeline rank: a thread that joins rank {@code rank} of the in-JVM group once and then runs one
 * step per task with its {@link PipelineExecutor} and its stages, until a shutdown task.
 *
 * <p>With data-parallel replicas ({@code replicas > 1}) the world is a {@code dp x pp}
 * {@link DeviceMesh} (world rank {@code d * pp + p} is pipeline rank {@code p} of replica {@code d}):
 * the executor runs on the rank's {@code pp} sub-group, and its stages share their gradients with the
 * other replicas over its {@code dp} sub-group ({@link StageDataParallel}).
 *
 * <p>The executor's links are sized for the largest message they carry, which depends on the
 * microbatch size; a step whose messages are larger than the links' slots recreates the executor
 * (collective: every rank gets the same task, so all of them do).
 */
final class PipelineRankWorker {

    /** A step for this rank; {@code plan == null} means shut down. */
    record Task(StepPlan plan, long slotBytes, CompletableFuture<StepTimeline> result) {
    }

    /** This thread's rank in the world: {@code replica * pipelineRanks + pipelineRank}. */
    private final int rank;
    private final int replicas;
    private final InJvmWorld world;
    private final Schedule schedule;
    private final PipelineShape shape;
    private final int slots;
    private final Map<Integer, Dl4jPipelineStage> stages;
    private final BlockingQueue<Task> tasks = new LinkedBlockingQueue<>();
    private final CompletableFuture<Void> ready = new CompletableFuture<>();
    private final Thread thread;

    // Owned by the worker thread.
    private PipelineExecutor executor;

    PipelineRankWorker(int rank, int replicas, InJvmWorld world, Schedule schedule, PipelineShape shape, int slots,
                       Map<Integer, Dl4jPipelineStage> stages) {
        this.rank = rank;
        this.replicas = replicas;
        this.world = world;
        this.schedule = schedule;
        this.shape = shape;
        this.slots = slots;
        this.stages = Map.copyOf(stages);
        String name = replicas == 1 ? "symmem4j-pipeline-rank-" + rank
                : "symmem4j-pipeline-dp" + rank / shape.ranks() + "-pp" + rank % shape.ranks();
        this.thread = Thread.ofPlatform().daemon().name(name).unstarted(this::run);
    }

    void start() {
        thread.start();
    }

    /** Completes when the thread joined the group. */
    CompletableFuture<Void> ready() {
        return ready;
    }

    void submit(Task task) {
        tasks.add(task);
    }

    void join() throws InterruptedException {
        thread.join();
    }

    private void run() {
        Group group = null;
        DeviceMesh mesh = null;
        StageDataParallel dataParallel = null;
        Group pipelineGroup;
        try {
            group = world.join(rank);
            pipelineGroup = group;
            if (replicas > 1) {
                mesh = DeviceMesh.of(group, "dp", replicas, "pp", shape.ranks());
                pipelineGroup = mesh.group("pp");
                dataParallel = new StageDataParallel(Communicator.create(mesh.group("dp")));
                for (Dl4jPipelineStage stage : stages.values()) {
                    stage.dataParallel(dataParallel);
                }
            }
            ready.complete(null);
        } catch (Throwable t) {
            ready.completeExceptionally(t);
            closeQuietly(dataParallel);
            closeQuietly(mesh);
            closeQuietly(group);
            return;
        }
        try {
            while (true) {
                Task task = tasks.take();
                if (task.plan() == null) {
                    break;
                }
                step(pipelineGroup, group, task);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            // collective: the trainer sends every rank its shutdown task in the same round, failed or not;
            // sub-groups' resources first, then the sub-groups, then the world's group
            closeQuietly(executor);
            closeQuietly(dataParallel);
            closeQuietly(mesh);
            closeQuietly(group);
        }
    }

    /** Runs one step; a failure completes the task's future and leaves the thread waiting for the shutdown task. */
    private void step(Group group, Group worldGroup, Task task) {
        try {
            if (executor == null || executor.layout().slotBytes() < task.slotBytes()) {
                if (executor != null) {
                    executor.close();
                    executor = null;
                }
                executor = PipelineExecutor.create(group, schedule, shape, stages, slots,
                        task.slotBytes());
            }
            for (Dl4jPipelineStage stage : stages.values()) {
                stage.beginStep(task.plan());
            }
            task.result().complete(executor.runStep());
        } catch (Throwable t) {
            if (replicas > 1) {
                // the other replicas wait for this one in their gradient all-reduce: the world's abort
                // reaches them through every dp sub-group's pads (Group.split), so they fail at once
                worldGroup.abort("pipeline step failed on " + Thread.currentThread().getName() + ": " + t);
            }
            task.result().completeExceptionally(t);
        }
    }

    private static void closeQuietly(AutoCloseable c) {
        if (c == null) {
            return;
        }
        try {
            c.close();
        } catch (Exception ignored) {
            // shutting down, possibly after a failure: peers may be gone
        }
    }
}
