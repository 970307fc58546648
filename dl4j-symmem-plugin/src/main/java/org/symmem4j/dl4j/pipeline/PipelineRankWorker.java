package org.symmem4j.dl4j.pipeline;

import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.pipeline.exec.StepTimeline;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;

/**
 * One pipeline rank of the trainer's in-JVM world: a thread that joins rank {@code rank} of the world
 * once, opens its {@link PipelineRank} and then runs one step per task, until a shutdown task.
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
        PipelineRank pipelineRank;
        try {
            group = world.join(rank);
            pipelineRank = PipelineRank.open(group, replicas, schedule, shape, slots, stages);
            ready.complete(null);
        } catch (Throwable t) {
            ready.completeExceptionally(t);
            PipelineRank.closeQuietly(group);
            return;
        }
        try {
            while (true) {
                Task task = tasks.take();
                if (task.plan() == null) {
                    break;
                }
                try {
                    task.result().complete(pipelineRank.step(task.plan(), task.slotBytes()));
                } catch (Throwable t) {
                    // the thread waits for the shutdown task, which the trainer sends every rank after a failure
                    task.result().completeExceptionally(t);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            // collective: the trainer sends every rank its shutdown task in the same round, failed or not;
            // the rank's resources first, then the world's group
            pipelineRank.close();
            PipelineRank.closeQuietly(group);
        }
    }
}
