package org.symmem4j.dl4j.train;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.Tags;
import java.nio.file.Path;
import java.time.Duration;
import org.deeplearning4j.core.storage.StatsStorageRouter;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.symmem4j.parallel.Group;

/**
 * The builder methods every trainer takes, declared once: group mode, the bound of every wait, meters, step
 * listeners, DL4J's listeners, the run's timeline, and (under each trainer's own name) ND4J's threads per rank. Each
 * trainer's builder extends it ({@code SymmemParallelWrapper.Builder}, {@code PipelineParallelTrainerBuilder}), adds its own options
 * and its {@code build()}, and hands {@link #options()} to the trainer it builds. Every setting is checked as it is
 * set, so a refusal names the call that was wrong.
 *
 * @param <B> the trainer's builder, which every method returns
 * @param <L> the trainer's step listener
 */
public abstract class TrainerBuilder<B extends TrainerBuilder<B, L>, L> {

    private final TrainerOptions<L> options = new TrainerOptions<>();
    private final ListenerOptions listeners = new ListenerOptions();

    /**
     * A builder with every shared option at its default.
     *
     * @throws IllegalArgumentException when {@code -Dsymmem4j.timeout.ms} is not a whole number of milliseconds
     */
    protected TrainerBuilder() {
    }

    /**
     * Group mode: this process (or thread) is one rank of {@code group}. Every rank of the group runs the same
     * program: it builds the same model (same configuration and initial parameters) and passes the same iterator to
     * {@code fit} (the same batches in the same order). For one JVM per rank started by {@code symmem4j-run} (or
     * torchrun or mpirun): {@code group(ProcessGroup.fromEnvironment())}. The group stays the caller's to close, after
     * the trainer. What a rank trains, which transports the group may live on and what group mode refuses is each
     * trainer's: its builder's class documentation says so.
     *
     * @param group the group, this rank's view of it
     * @return this builder
     * @throws NullPointerException when {@code group} is null
     */
    public B group(Group group) {
        options.group(group);
        return self();
    }

    /**
     * How long a rank (a worker, a pipeline rank) waits for another before failing (default
     * {@link TrainerOptions#defaultTimeout()}: 60 s, or {@code -Dsymmem4j.timeout.ms}). In group mode the default is
     * the group's timeout ({@code group.options().timeout()}), which bounds the group's collectives; a different value
     * here is refused when the trainer is built (create the group with the timeout wanted instead).
     *
     * @param timeout the bound of every wait for another rank; positive
     * @return this builder
     * @throws IllegalArgumentException when {@code timeout} is null, zero or negative
     */
    public B timeout(Duration timeout) {
        options.timeout(timeout);
        return self();
    }

    /**
     * Records the trainer's metrics into {@code registry}: the data-parallel trainer's sync metrics (names in
     * {@link org.symmem4j.gradsync.SyncMetrics}), the pipeline's (names in
     * {@link org.symmem4j.pipeline.exec.PipelineMetrics}, tags {@code schedule} and {@code transport}); {@code tags} go
     * on every meter (for example {@code application}).
     *
     * @param registry any Micrometer registry
     * @param tags     added to every meter
     * @return this builder
     * @throws NullPointerException when either is null
     */
    public B meterRegistry(MeterRegistry registry, Iterable<Tag> tags) {
        options.meterRegistry(registry, tags);
        return self();
    }

    /**
     * Records the trainer's metrics into {@code registry} ({@link #meterRegistry(MeterRegistry, Iterable)}), without
     * extra tags.
     *
     * @param registry any Micrometer registry
     * @return this builder
     * @throws NullPointerException when {@code registry} is null
     */
    public B meterRegistry(MeterRegistry registry) {
        return meterRegistry(registry, Tags.empty());
    }

    /**
     * Called after every step with its report (loss and timings; the pipeline's also its timelines), in the order
     * added.
     *
     * @param listener called on the thread that called {@code fit()}
     * @return this builder
     * @throws NullPointerException when {@code listener} is null
     */
    public B stepListener(L listener) {
        options.stepListener(listener);
        return self();
    }

    /**
     * Attaches {@code listeners} to the model at {@code build()} (ParallelWrapper's {@code setListeners}, which adds
     * them to those it took from the model): the trainer calls them, with the model's own, as DL4J's {@code fit}
     * calls them for one model trained on each step's batch (every worker's together; see the trainer's class
     * comment). A listener already attached is not added twice; calls add up. Listeners that report to a
     * StatsStorageRouter (the UI's {@code StatsListener}) need one: give it here with
     * {@link #listeners(StatsStorageRouter, TrainingListener...)}, or build them with their storage.
     *
     * @param listeners DL4J listeners, called as {@code fit()} calls them
     * @return this builder
     */
    public B listeners(TrainingListener... listeners) {
        this.listeners.add(listeners);
        return self();
    }

    /**
     * {@link #listeners(TrainingListener...)} with a router for the listeners that send reports
     * ({@code RoutingIterationListener}s such as {@code StatsListener}), as
     * {@code ParallelWrapper.setListeners(StatsStorageRouter, ...)}: at {@code build()} every such listener on the
     * model or given here that has no router of its own gets {@code router} (e.g. an {@code InMemoryStatsStorage} the
     * UI reads); one with its own keeps it. Reports come from the caller's thread, one per step, as from one model
     * (no worker ids: the replicas and stages are not separate models to the UI).
     *
     * @param router    where {@code RoutingIterationListener}s without a router of their own report
     * @param listeners DL4J listeners, called as {@code fit()} calls them
     * @return this builder
     * @throws NullPointerException when {@code router} is null
     */
    public B listeners(StatsStorageRouter router, TrainingListener... listeners) {
        this.listeners.router(router);
        return listeners(listeners);
    }

    /**
     * Records the run's timeline, up to {@code maxSteps} steps over all {@code fit()} calls (later steps are counted,
     * not kept), as one Chrome trace: the trainer's {@code runTimeline()} gives it, and
     * {@code runTimeline().writeChromeTrace(path)} writes a file for https://ui.perfetto.dev. The data-parallel
     * trainer records per worker its compute, sync (with the wait for its peers), update and every bucket's
     * all-reduce, the caller's reading, waiting and work between steps, and a steps track, and without this call
     * stamps and allocates nothing; the pipeline records every rank's actions of every step, about 100 bytes per
     * event, a few dozen events per rank and step.
     *
     * @param maxSteps the most steps recorded, at least 1
     * @return this builder
     * @throws IllegalArgumentException when {@code maxSteps} is below 1
     */
    public B recordTimeline(int maxSteps) {
        options.recordTimeline(maxSteps);
        return self();
    }

    /**
     * Checkpoints the trainer takes itself, inside {@code fit}, after every {@code steps}-th step (counted over every
     * {@code fit} of the trainer's life), each in its own directory {@code root/step-<n>}: every file written to a
     * temporary name, forced to disk and renamed, the manifest with every file's size and CRC-32C written last
     * ({@link CheckpointDirectory}). The newest {@link #keepCheckpoints} complete ones are kept (default 2); an older
     * one is deleted only once a newer one is complete. In group mode it is collective (every rank counts the same
     * steps). With {@link #resumeFrom} on the same root, a restarted program resumes where the last complete one
     * stands: {@code .checkpointEvery(100, dir).resumeFrom(dir)}. What a checkpoint holds is the trainer's
     * {@code saveCheckpoint}'s; a tensor-parallel network's ranks write theirs apart, under {@code root/tp-R-of-S}, and
     * resume from the newest step complete on every rank ({@link CheckpointLayout}).
     *
     * @param steps at least 1
     * @param root  the run's checkpoint directory: writable, or creatable (nothing is written before {@code fit})
     * @return this builder
     * @throws IllegalArgumentException when {@code steps} is below 1 or {@code root} is not a writable directory
     */
    public B checkpointEvery(int steps, Path root) {
        options.checkpointEvery(steps, root);
        return self();
    }

    /**
     * Checkpoints as {@link #checkpointEvery(int, Path)}, taken at the first step boundary {@code interval} after the
     * last one (or after {@code build()}); in group mode rank 0's clock decides, told to every rank at each step
     * boundary (a small all-gather per step). Both forms may be given: a checkpoint is taken when either is due.
     *
     * @param interval positive
     * @param root     the run's checkpoint directory: writable, or creatable
     * @return this builder
     * @throws IllegalArgumentException when {@code interval} is not positive or {@code root} is not writable
     */
    public B checkpointEvery(Duration interval, Path root) {
        options.checkpointEvery(interval, root);
        return self();
    }

    /**
     * How many complete periodic checkpoints are kept (default 2): older ones, and torn ones older than the newest
     * complete one, are deleted after each new one is complete.
     *
     * @param keep at least 1
     * @return this builder
     * @throws IllegalArgumentException when {@code keep} is below 1
     */
    public B keepCheckpoints(int keep) {
        options.keepCheckpoints(keep);
        return self();
    }

    /**
     * At {@code build()}, restores the newest complete checkpoint under {@code root} ({@code step-<n>} directories
     * that {@link #checkpointEvery} wrote; torn ones are skipped with a log line), or starts fresh when there is none.
     * The model then holds the checkpoint's parameters, updater state and counters (so
     * {@code for (int e = model.getEpochCount(); e < epochs; e++) trainer.fit(iterator)} runs the remaining epochs),
     * the trainer's step counter goes on from the checkpoint's, and the first {@code fit(iterator)} skips the batches
     * of the epoch that the checkpoint had already trained (read from the iterator, not trained): with the same data
     * in the same order, the result equals an uninterrupted run's, bitwise. The trainer may run another rank count
     * than the one that wrote the checkpoint: the data-parallel wrapper re-shards a checkpoint of N workers onto M
     * (the batches skipped are the same, the steps after it take M batches each), the pipeline trainer takes another
     * {@code dataParallel} (docs/resharding.md); a tensor-parallel network needs the degree that wrote it (another is
     * refused with the fix). The trainer's {@code resumedFrom()} says what was restored. In group
     * mode it is collective, and every rank must see the same checkpoints.
     *
     * @param root the run's checkpoint directory; need not exist yet
     * @return this builder
     * @throws IllegalArgumentException when {@code root} exists and is not a readable directory
     */
    public B resumeFrom(Path root) {
        options.resumeFrom(root);
        return self();
    }

    /**
     * Restores a trainer from the newest complete checkpoint under a root ({@code restoreLatest}).
     *
     * @param <T> the trainer
     */
    @FunctionalInterface
    protected interface Resume<T> {
        /**
         * Restores {@code trainer} from the newest complete checkpoint under {@code root}, if there is one.
         *
         * @param trainer the trainer just built
         * @param root    the root given to {@link #resumeFrom}
         * @throws java.io.IOException when the checkpoint cannot be read
         */
        void restoreLatest(T trainer, Path root) throws java.io.IOException;
    }

    /**
     * For the trainer's {@code build()}: with {@link #resumeFrom}, restores {@code trainer} from the newest complete
     * checkpoint under the root (nothing when there is none); a failure closes it and is thrown.
     *
     * @param trainer the trainer just built
     * @param resume  how it restores the newest complete checkpoint
     * @param <T>     the trainer
     * @return {@code trainer}
     * @throws java.io.UncheckedIOException when the checkpoint cannot be read (the trainer is closed)
     */
    protected final <T extends AutoCloseable> T resumed(T trainer, Resume<T> resume) {
        Path root = options.resumeRoot();
        if (root == null) {
            return trainer;
        }
        try {
            resume.restoreLatest(trainer, root);
            return trainer;
        } catch (java.io.IOException | RuntimeException e) {
            try {
                trainer.close();
            } catch (Exception closing) {
                e.addSuppressed(closing);
            }
            throw e instanceof java.io.IOException io
                    ? new java.io.UncheckedIOException("resumeFrom root=" + root + ": " + e.getMessage(), io)
                    : (RuntimeException) e;
        }
    }

    /**
     * ND4J (OpenMP and BLAS) threads per rank, for the trainer's own builder method, which names the setting.
     *
     * @param setting the builder method's name, as the refusal names it ({@code ompThreadsPerWorker})
     * @param threads at least 1
     * @return this builder
     * @throws IllegalArgumentException when {@code threads} is below 1
     */
    protected final B ndThreadsPerRank(String setting, int threads) {
        options.ndThreadsPerRank(setting, threads, "must be >= 1 (ND4J threads per rank; fix: pass a"
                + " positive count, or leave it unset to share the cores)");
        return self();
    }

    /**
     * The DL4J listeners given to {@link #listeners}, for the trainer's builder to attach at {@code build()}.
     *
     * @return the listener options (the builder's own)
     */
    protected final ListenerOptions listenerOptions() {
        return listeners;
    }

    /**
     * The options set so far, for the trainer's builder and the trainer it builds.
     *
     * @return the options (the builder's own, not a copy)
     */
    protected final TrainerOptions<L> options() {
        return options;
    }

    /**
     * This builder, as the trainer's builder type, for the methods a subclass adds to return.
     *
     * @return this builder
     */
    @SuppressWarnings("unchecked")
    protected final B self() {
        return (B) this;
    }
}
