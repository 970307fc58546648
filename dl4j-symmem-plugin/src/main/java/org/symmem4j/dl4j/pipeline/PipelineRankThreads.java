package org.symmem4j.dl4j.pipeline;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.symmem4j.dl4j.train.RankFailures;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.affinity.RankAffinity;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.pipeline.exec.StepTimeline;

/**
 * Thread mode's ranks: an in-JVM world of {@code dp x pp x tp} rank threads, one {@link PipelineRankWorker} per world
 * rank (world rank {@code (d * pp + p) * tp + t} is pipeline rank {@code p} of replica {@code d}, tensor-parallel rank
 * {@code t}), started together and stopped
 * together (a collective close). Group mode runs its one rank on the caller's thread instead ({@link PipelineRank}).
 */
final class PipelineRankThreads {

    private final InJvmWorld world;
    private final List<PipelineRankWorker> workers;
    /** World ranks per data-parallel replica: pipeline ranks times tensor-parallel ranks. */
    private final int ranksPerReplica;

    private PipelineRankThreads(InJvmWorld world, List<PipelineRankWorker> workers, int ranksPerReplica) {
        this.world = world;
        this.workers = workers;
        this.ranksPerReplica = ranksPerReplica;
    }

    /**
     * Starts one rank thread per spec (in world rank order) and waits until every one opened.
     *
     * @throws SymmemException when a rank failed to open (the others are stopped)
     */
    static PipelineRankThreads start(List<PipelineRank.Spec> specs, int ranksPerReplica, Duration timeout) {
        // symmem4j.affinity: checked before the world exists; each rank thread pins itself before it joins
        RankAffinity affinity = RankAffinity.fromConfiguration(specs.size());
        InJvmWorld world = InJvmWorld.create(specs.size(), GroupOptions.defaults().withTimeout(timeout));
        List<PipelineRankWorker> workers = new ArrayList<>(specs.size());
        for (int rank = 0; rank < specs.size(); rank++) {
            PipelineRankWorker worker = new PipelineRankWorker(rank, world, specs.get(rank));
            worker.pinTo(affinity, rank);
            workers.add(worker);
        }
        PipelineRankThreads threads = new PipelineRankThreads(world, List.copyOf(workers), ranksPerReplica);
        RankRuntime.startAll(threads.workers, timeout, "pipeline ranks", threads::stop);
        return threads;
    }

    /**
     * Runs one step: replica {@code d}'s plan on its ranks. Returns every rank's timeline in world rank order, null
     * for a rank that failed; its failure and rank are added to {@code failures} and {@code failedRanks}.
     */
    List<StepTimeline> step(List<StepPlan> plans, long slotBytes, long step, Duration timeout, List<Throwable> failures,
                            List<Integer> failedRanks) {
        List<CompletableFuture<StepTimeline>> results = new ArrayList<>(workers.size());
        for (int w = 0; w < workers.size(); w++) {
            CompletableFuture<StepTimeline> result = new CompletableFuture<>();
            results.add(result);
            // world rank w belongs to replica w / (pp x tp); a replica's tensor-parallel ranks share its plan
            workers.get(w).submit(new PipelineRankWorker.Task(plans.get(w / ranksPerReplica), slotBytes, result));
        }
        List<StepTimeline> timelines = new ArrayList<>(workers.size());
        Duration bound = RankFailures.stepResultBound(timeout);
        for (int rank = 0; rank < results.size(); rank++) {
            try {
                timelines.add(RankFailures.await(results.get(rank), bound, "rank " + rank, rank, step, failures, failedRanks));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                failures.add(new SymmemException("interrupted while waiting for rank " + rank + " at step " + step
                        + ": expected the thread that called fit() to run until fit() returns (fix: do not interrupt it;"
                        + " to stop training, let fit() return and call close())", e));
                failedRanks.add(rank);
                break;
            }
        }
        return timelines;
    }

    /** Sends every rank its shutdown task in the same round (a collective close), joins the threads, closes the world. */
    void stop() {
        for (PipelineRankWorker worker : workers) {
            worker.submit(new PipelineRankWorker.Task(null, 0, null));
        }
        for (PipelineRankWorker worker : workers) {
            try {
                worker.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        world.close();
    }
}
