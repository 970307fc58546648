package org.symmem4j.dl4j.pipeline;

import java.util.concurrent.CompletableFuture;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.pipeline.exec.StepTimeline;

/**
 * One pipeline rank of the trainer's in-JVM world: a {@link RankRuntime} thread that joins rank {@code rank} of the
 * world once, opens its {@link PipelineRank} and then runs one step per task, until a shutdown task (also after a
 * failed step: the trainer sends every rank its shutdown task after a failure).
 */
final class PipelineRankWorker extends RankRuntime<PipelineRankWorker.Task> {

    /** A step for this rank; {@code plan == null} means shut down. */
    record Task(StepPlan plan, long slotBytes, CompletableFuture<StepTimeline> result) {
    }

    /** This thread's rank in the world: {@code (replica * pipelineRanks + pipelineRank) * tp + tensorParallelRank}. */
    private final int rank;
    private final InJvmWorld world;
    private final PipelineRank.Spec spec;

    // Owned by the rank's thread.
    private Group group;
    private PipelineRank pipelineRank;

    PipelineRankWorker(int rank, InJvmWorld world, PipelineRank.Spec spec) {
        super(threadName(rank, spec), task -> task.plan() == null, AfterFailure.CONTINUE_UNTIL_SHUTDOWN);
        this.rank = rank;
        this.world = world;
        this.spec = spec;
    }

    /** {@code symmem4j-pipeline-rank-R}, or on a mesh {@code symmem4j-pipeline-dpD-ppP} (and {@code -tpT}). */
    private static String threadName(int rank, PipelineRank.Spec spec) {
        if (!spec.meshed()) {
            return "symmem4j-pipeline-rank-" + rank;
        }
        int tp = spec.tensorParallel();
        int pp = spec.shape().ranks();
        return "symmem4j-pipeline-dp" + rank / (tp * pp) + "-pp" + rank / tp % pp + (tp > 1 ? "-tp" + rank % tp : "");
    }

    /** Joins the world and opens the rank's {@link PipelineRank}; {@link #ready()} completes after it. */
    @Override
    protected void open() {
        group = world.join(rank);
        pipelineRank = PipelineRank.open(group, spec);
    }

    @Override
    protected void openFailed(Throwable cause) {
        RankRuntime.closeQuietly(group);
    }

    @Override
    protected boolean step(Task task) {
        try {
            task.result().complete(pipelineRank.step(task.plan(), task.slotBytes()));
            return true;
        } catch (Throwable t) {
            // the thread waits for the shutdown task, which the trainer sends every rank after a failure
            task.result().completeExceptionally(t);
            return false;
        }
    }

    @Override
    protected void close() {
        // collective: the trainer sends every rank its shutdown task in the same round, failed or not;
        // the rank's resources first, then the world's group
        pipelineRank.close();
        RankRuntime.closeQuietly(group);
    }
}
