package org.symmem4j.dl4j.pipeline;

import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.InJvmWorld;
import org.symmem4j.pipeline.exec.PipelineExecutor;
import org.symmem4j.pipeline.exec.StageCompute;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;

/**
 * One pipeline rank: a thread that joins rank {@code rank} of the in-JVM group once and then runs one
 * step per task with its {@link PipelineExecutor} and its stages, until a shutdown task.
 *
 * <p>The executor's links are sized for the largest message they carry, which depends on the
 * microbatch size; a step whose messages are larger than the links' slots recreates the executor
 * (collective: every rank gets the same task, so all of them do).
 */
final class PipelineRankWorker {

    /** A step for this rank; {@code plan == null} means shut down. */
    record Task(StepPlan plan, long slotBytes, CompletableFuture<StepTimeline> result) {
    }

    private final int rank;
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

    PipelineRankWorker(int rank, InJvmWorld world, Schedule schedule, PipelineShape shape, int slots,
                       Map<Integer, Dl4jPipelineStage> stages) {
        this.rank = rank;
        this.world = world;
        this.schedule = schedule;
        this.shape = shape;
        this.slots = slots;
        this.stages = Map.copyOf(stages);
        this.thread = Thread.ofPlatform().daemon().name("symmem4j-pipeline-rank-" + rank).unstarted(this::run);
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
        Group group;
        try {
            group = world.join(rank);
            ready.complete(null);
        } catch (Throwable t) {
            ready.completeExceptionally(t);
            return;
        }
        try {
            while (true) {
                Task task = tasks.take();
                if (task.plan() == null) {
                    break;
                }
                step(group, task);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            // collective: the trainer sends every rank its shutdown task in the same round, failed or not
            closeQuietly(executor);
            closeQuietly(group);
        }
    }

    /** Runs one step; a failure completes the task's future and leaves the thread waiting for the shutdown task. */
    private void step(Group group, Task task) {
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
