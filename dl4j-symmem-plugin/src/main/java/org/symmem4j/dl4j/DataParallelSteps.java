package org.symmem4j.dl4j;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.Supplier;
import org.nd4j.linalg.api.concurrency.AffinityManager;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.train.ModelListeners;
import org.symmem4j.dl4j.train.RankFailures;
import org.symmem4j.gradsync.SyncMetrics;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;

/**
 * The data-parallel steps as the caller's thread runs them: hands a step's batches to the workers, reads the next
 * step's meanwhile, collects the workers' results, merges the step's score as one model on the merged batch would
 * have it, reports the step (log, metrics, the user's listeners and step listeners, the timeline) and turns the
 * workers' failures into the one exception {@code fit} throws (the origin's, its echoes suppressed). Counts the
 * steps of the wrapper's life. Logs as the wrapper.
 */
final class DataParallelSteps {

    private static final Logger LOG = LoggerFactory.getLogger(SymmemParallelWrapper.class);

    private final ModelReplica model;
    private final DataParallelSettings settings;
    private final SyncMetrics metrics;
    private final List<SymmemParallelWrapper.StepListener> stepListeners;
    /** The run's timeline, or null when not recording. */
    private final DataParallelTimeline timeline;
    private final DataParallelWorkers pool;
    /** Steps so far, over every {@code fit}: the next step's number. */
    private long step;

    DataParallelSteps(ModelReplica model, DataParallelSettings settings, SyncMetrics metrics,
                      List<SymmemParallelWrapper.StepListener> stepListeners, DataParallelTimeline timeline,
                      DataParallelWorkers pool) {
        this.model = model;
        this.settings = settings;
        this.metrics = metrics;
        this.stepListeners = List.copyOf(stepListeners);
        this.timeline = timeline;
        this.pool = pool;
        // ZeRO's shrink goes back to a checkpoint (ShardedShrink), never to the step's start: no copy; hybrid
        // sharding's goes back to it (HybridShrink), and keeps each worker's own blocks and updater-state shard, in
        // group mode and as threads (where a shard group split between the step's start and end holds no whole copy);
        // plain data parallelism's threads each hold a whole replica: the one at the start is enough
        this.keepsStepStart = settings.shrinks() && (settings.shardGroupSize() > 0
                || settings.group() != null && settings.sharding() == null);
    }

    /** {@return the steps done so far, over every {@code fit}: the next step's number} */
    long stepsDone() {
        return step;
    }

    /** Goes on counting from a restored checkpoint's steps. */
    void resumeAt(long stepsDone) {
        step = stepsDone;
    }

    /**
     * What {@link #run} did (null if the batches were empty, or if the step was lost), the next step's batches, read
     * meanwhile, and, when workers failed under {@link WorkerFailure#SHRINK}, who ({@code lost}, else null).
     */
    record StepOutcome(StepReport report, List<Object> following, LostWorkers lost) {
        StepOutcome(StepReport report, List<Object> following) {
            this(report, following, null);
        }
    }

    /**
     * A step that failed under {@link WorkerFailure#SHRINK} because workers failed on their own (not echoes of
     * another's failure): the step, the dead workers (rank order; in group mode empty: this rank's failure only
     * echoes a peer's, and the group's membership authority names the dead), what {@code fit} throws if the survivors
     * are too few, the replicas' iteration count when the step was handed out (every replica's: the workers were
     * idle), each local worker's state at the step's start ({@code stepStarts}, by local worker: group mode's one, plain
     * or hybrid; every thread's with hybrid sharding; empty for plain threads, and with ZeRO sharding other than hybrid,
     * whose shrink goes back to a checkpoint), and when the wrapper's thread had every worker's outcome
     * ({@link System#nanoTime()}).
     */
    record LostWorkers(long step, List<Integer> dead, RuntimeException failure, int iterationAtStart,
                       List<StepStart> stepStarts, long failedNanos) {

        /** {@return group mode's one worker's state at the step's start} */
        StepStart stepStart() {
            return stepStarts.getFirst();
        }
    }

    /** Under SHRINK, plain in group mode or hybrid sharding in either mode: whether {@link #stepStarts} are kept. */
    private final boolean keepsStepStart;
    /** Each local worker's state at the current step's start (by local worker; grown as needed); empty if none. */
    private final List<StepStart> stepStarts = new ArrayList<>();

    /** Commits the step's JFR events of the workers that returned a result (a failed worker's stays uncommitted). */
    private void commitStepEvents(TrainingStepEvent[] events, DataParallelWorker.Result[] results, int first, int k,
                                  long[] examples, long lastSyncStart) {
        for (int j = 0; j < events.length; j++) {
            DataParallelWorker.Result r = results[j];
            if (r == null) {
                continue;
            }
            TrainingStepEvent e = events[j];
            e.end();
            e.step = step;
            e.worker = first + j;
            e.examples = first + j < k ? examples[first + j] : 0;
            e.sync = r.syncNanos();
            e.compute = Math.max(0, r.stepNanos() - r.syncNanos());
            e.waitForPeers = r.syncStart() == 0 ? 0 : Math.max(0, lastSyncStart - r.syncStart());
            e.skipped = r.skipped();
            e.commit();
        }
    }

    /**
     * Runs one step on {@code batches} (one per worker, or fewer), then the user's listeners;
     * reads the next step's batches from {@code next} while the workers compute.
     *
     * @param fits the wrapper's {@code fit()} calls so far, this one's included (the timeline's "between steps")
     */
    StepOutcome run(List<Object> batches, ModelListeners listeners, Supplier<List<Object>> next, long fits) {
        List<DataParallelWorker> workers = pool.all();
        int k = batches.size();
        long total = 0;
        long[] examples = new long[k];
        for (int i = 0; i < k; i++) {
            examples[i] = MicroBatches.examples(batches.get(i));
            total += examples[i];
        }
        if (total == 0) {
            return new StepOutcome(null, next.get()); // nothing to learn from empty batches
        }
        // Workers past the last batch run the first batch but contribute zeros; every worker
        // divides the summed gradient by the examples of the whole step (see DataParallelWorker).
        boolean stamping = timeline != null && timeline.wantsStep();
        long handedOut = stamping ? System.nanoTime() : 0;
        // this wrapper's ranks: every worker's (threads), or its own rank of the group (group mode)
        int first = settings.firstLocalRank();
        int local = workers.size();
        int iterationAtStart = workers.getFirst().replica().iterationCount(); // idle workers: every replica's
        if (keepsStepStart) {
            for (int j = 0; j < local; j++) { // idle workers (group mode: one)
                if (stepStarts.size() == j) {
                    stepStarts.add(new StepStart());
                }
                stepStarts.get(j).take(workers.get(j));
            }
        }
        TrainingStepEvent[] jfr = TrainingStepEvent.beginAll(local); // null unless a JFR recording enables them
        DataParallelWorker.Result[] jfrResults = jfr == null ? null : new DataParallelWorker.Result[local];
        List<CompletableFuture<DataParallelWorker.Result>> results = new ArrayList<>(local);
        for (int j = 0; j < local; j++) {
            int i = first + j;
            boolean idle = i >= k;
            CompletableFuture<DataParallelWorker.Result> f = new CompletableFuture<>();
            results.add(f);
            workers.get(j).submit(new DataParallelWorker.Task(batches.get(idle ? 0 : i), idle, idle ? 0 : examples[i], total,
                    step, listeners.needsActivations(), listeners.needsGradient(), f));
        }
        List<Object> following = next.get(); // while the workers compute
        long batchesRead = stamping ? System.nanoTime() : 0;
        List<DataParallelWorker.Result> finished = stamping ? new ArrayList<>(local) : null;
        double[] scores = new double[k];
        double mergedMeanLoss = Double.NaN;
        double regularization = 0;
        long lastSyncStart = 0;
        long lastSyncEnd = 0;
        long stepNanos = 0;
        long syncNanos = 0;
        StepReport.Collectives collectives = StepReport.Collectives.NONE;
        boolean skipped = false;
        List<Object> activations = new ArrayList<>(k);
        List<Throwable> failures = new ArrayList<>();
        List<Integer> failedWorkers = new ArrayList<>();
        Duration bound = RankFailures.stepResultBound(settings.timeout());
        for (int j = 0; j < local; j++) {
            int i = first + j;
            DataParallelWorker.Result r;
            try {
                r = RankFailures.await(results.get(j), bound, "worker " + i, i, step, failures, failedWorkers);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new SymmemException("interrupted while waiting for workers at step " + step + ": expected the"
                        + " thread that called fit() to run until fit() returns (fix: do not interrupt it; to stop"
                        + " training, let fit() return and call close())", e);
            }
            if (r == null) {
                continue; // failed: its failure is among the failures
            }
            if (finished != null) {
                finished.add(r);
            }
            if (jfrResults != null) {
                jfrResults[j] = r;
            }
            if (i < k) {
                scores[i] = r.score();
                activations.add(r.activations());
            }
            if (j == 0) {
                regularization = r.regularization(); // the same parameters, so the same term, on every worker
                mergedMeanLoss = r.mergedMeanLoss();
            }
            stepNanos = Math.max(stepNanos, r.stepNanos());
            syncNanos = Math.max(syncNanos, r.syncNanos());
            collectives = collectives.max(r.collectives());
            lastSyncStart = Math.max(lastSyncStart, r.syncStart());
            lastSyncEnd = Math.max(lastSyncEnd, r.syncEnd());
            skipped |= r.skipped();
        }
        long collected = stamping ? System.nanoTime() : 0;
        if (jfr != null) {
            commitStepEvents(jfr, jfrResults, first, k, examples, lastSyncStart);
        }
        if (!failures.isEmpty()) {
            RuntimeException failure = failure(failures, failedWorkers);
            metrics.recordFailure(failureReason(failure));
            if (!settings.shrinks()) {
                throw failure;
            }
            List<Integer> dead = deadWorkers(failures, failedWorkers);
            boolean echoes = failures.stream().allMatch(f -> f instanceof PeerTimeoutException);
            if (settings.group() != null ? !echoes : dead.isEmpty()) {
                // group mode: this rank's own failure ends its fit (its process exits; the launcher announces it dead
                // and the peers shrink without it); threads: only echoes, no worker to drop
                throw failure;
            }
            return new StepOutcome(null, following, new LostWorkers(step, settings.group() != null ? List.of() : dead,
                    failure, iterationAtStart, List.copyOf(stepStarts.subList(0, keepsStepStart ? local : 0)),
                    System.nanoTime()));
        }
        // DL4J's score of one model on the merged batch: each worker's mean loss (its score less the
        // regularization term) weighted by its examples, plus the term once
        double meanLoss = 0;
        if (settings.group() != null) {
            meanLoss = mergedMeanLoss; // the same sum, over every rank's term, which the worker took across the group
        } else {
            for (int i = 0; i < k; i++) {
                meanLoss += examples[i] * (scores[i] - regularization) / total;
            }
        }
        double score = meanLoss + regularization;
        // from the last worker's arrival at the sync to the last worker's finish: sync nothing hid
        long exposedSyncNanos = lastSyncStart == 0 ? 0 : Math.max(0, lastSyncEnd - lastSyncStart);
        StepReport report = new StepReport(step, total, score, stepNanos, syncNanos, skipped, exposedSyncNanos,
                collectives);
        if (settings.reportScoreAfterAveraging()) {
            // ParallelWrapper logs "Averaged score" (the workers' unweighted mean) after each averaging;
            // here the step's exact merged-batch score, which the model reports after fit
            LOG.info("symmem4j: score after averaging: step={} score={} examples={} skipped={} syncMillis={}", step, score,
                    total, skipped, String.format(java.util.Locale.ROOT, "%.3f", syncNanos / 1e6));
        }
        metrics.recordStep(total, model.params().length() * model.params().dataType().width(), stepNanos, score, skipped);
        step++;
        long listenersStart = stamping ? System.nanoTime() : 0;
        if (!listeners.isEmpty() && !skipped) {
            listeners.step(model, new FinishedStep(batches, activations, score));
        }
        for (SymmemParallelWrapper.StepListener l : stepListeners) {
            l.onStep(report);
        }
        if (stamping) {
            // every worker's result future completed (publishing its stamps) and the next step is not
            // handed out yet (the workers overwrite them then)
            boolean anyListener = (!listeners.isEmpty() && !skipped) || !stepListeners.isEmpty();
            timeline.record(report.step(), fits, report, new DataParallelTimeline.CallerStamps(handedOut, batchesRead, collected,
                    anyListener ? listenersStart : 0, anyListener ? System.nanoTime() : 0), finished, workers);
        } else if (timeline != null) {
            timeline.dropStep();
        }
        return new StepOutcome(report, following);
    }

    /** The batches one model would see merged: with gradient accumulation, every micro-batch of every worker. */
    static List<Object> plainBatches(List<Object> batches) {
        List<Object> out = new ArrayList<>();
        for (Object b : batches) {
            if (b instanceof MicroBatches micro) {
                out.addAll(micro.batches());
            } else {
                out.add(b);
            }
        }
        return out;
    }

    /** A finished step as the user's listeners see it; used only while the workers are idle. */
    private final class FinishedStep implements ModelListeners.Step {
        private final List<Object> batches;
        private final List<Object> activations;
        private final double score;

        FinishedStep(List<Object> batches, List<Object> activations, double score) {
            this.batches = plainBatches(batches);
            this.activations = activations;
            this.score = score;
        }

        @Override
        public List<Object> batches() {
            return batches;
        }

        @Override
        public List<Object> activations() {
            return activations;
        }

        @Override
        public double score() {
            return score;
        }

        @Override
        public void assembleGradient(INDArray target) {
            // plain data parallelism: worker 0 kept the whole sum; sharded: every worker its shard
            for (DataParallelWorker w : pool.all()) {
                DataParallelWorker.GradientSnapshot g = w.gradientSnapshot();
                if (g == null) {
                    continue;
                }
                long length = settings.sharding() == null ? target.length() : w.sharded().end() - w.sharded().start();
                long width = target.dataType().width();
                // copied through host memory: on a GPU backend (GPU mode) the kept sum is written on the device
                Nd4j.getAffinityManager().ensureLocation(g.values(), AffinityManager.Location.HOST);
                java.lang.foreign.MemorySegment.copy(ModelReplica.segmentOf(g.values()), 0, ModelReplica.segmentOf(target),
                        g.start() * width, length * width);
            }
            Nd4j.getAffinityManager().tagLocation(target, AffinityManager.Location.HOST);
        }

        @Override
        public void syncModel() {
            pool.pullModelFromReplicas();
            // after DL4J's step the gradient view holds the update it subtracted
            model.gradientView().assign(pool.all().getFirst().replica().gradientView());
        }

        @Override
        public void syncReplicasIfChanged() {
            if (!pool.replicasMatchModel()) {
                pool.pushModelToReplicas();
            }
        }
    }

    /**
     * The workers a shrink removes: those whose failure is their own, not an echo of another's (a peer's timeout or
     * abort); none when the step's verdict is a non-finite gradient (the same on every worker, no worker lost) or when
     * every failure is an echo (no worker to blame: the step fails as without SHRINK).
     */
    private static List<Integer> deadWorkers(List<Throwable> failures, List<Integer> failedWorkers) {
        List<Integer> dead = new ArrayList<>();
        for (int i = 0; i < failures.size(); i++) {
            Throwable f = failures.get(i);
            if (f instanceof NonFiniteGradientException) {
                return List.of();
            }
            if (!(f instanceof PeerTimeoutException)) {
                dead.add(failedWorkers.get(i));
            }
        }
        return dead;
    }

    /** The exception that caused the others: a worker's own error before the peers' timeouts it triggered. */
    private RuntimeException failure(List<Throwable> failures, List<Integer> failedWorkers) {
        int origin = RankFailures.origin(failures, f -> f instanceof PeerTimeoutException);
        Throwable cause = failures.get(origin);
        RuntimeException out = cause instanceof NonFiniteGradientException nf ? nf
                : new DataParallelTrainingException("data-parallel fit failed: worker " + failedWorkers.get(origin)
                        + " at step " + step + ": " + cause + " (fix: correct what the cause names and resume from the"
                        + " newest complete checkpoint with checkpointEvery(k, dir).resumeFrom(dir), or build with"
                        + " onWorkerFailure(WorkerFailure.SHRINK) to go on without a worker that died)",
                        failedWorkers.get(origin), step, cause);
        return RankFailures.suppressOthers(out, failures, origin);
    }

    /** The {@code reason} tag of a failed step: what its first worker failure was. */
    private static SyncMetrics.FailureReason failureReason(RuntimeException failure) {
        if (failure instanceof NonFiniteGradientException) {
            return SyncMetrics.FailureReason.NON_FINITE;
        }
        return failure.getCause() instanceof PeerTimeoutException t && t.reason() == PeerTimeoutException.Reason.DEADLINE_PASSED
                ? SyncMetrics.FailureReason.TIMEOUT : SyncMetrics.FailureReason.ERROR;
    }
}
