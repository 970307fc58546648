package org.symmem4j.dl4j;

import java.util.Iterator;
import org.nd4j.linalg.dataset.api.iterator.DataSetIterator;
import org.nd4j.linalg.dataset.api.iterator.MultiDataSetIterator;
import org.symmem4j.dl4j.train.CheckpointLayout;
import org.symmem4j.dl4j.train.FitAgreement;
import org.symmem4j.dl4j.train.ModelListeners;
import org.symmem4j.dl4j.train.ResumePosition;

/**
 * The start of {@link SymmemParallelWrapper}'s {@code fit()}: every refusal that depends on what this rank was given,
 * checked and then agreed by every rank of the group (and every tensor-parallel rank) before any data moves
 * ({@link FitAgreement}): the fit called for the model ({@code fit(MultiDataSetIterator)} on a network), an iterator
 * that cannot be read ahead with {@code prefetchBuffer}, listeners on the model that the wrapper cannot call as
 * configured, and a resume position the iterator does not reach. A rank whose checks passed has skipped the batches
 * the checkpoint it resumed from had trained; the fit goes on with its next batch.
 */
final class DataParallelFitStart {

    private DataParallelFitStart() {
    }

    /**
     * One fit's iterator, as {@code fit} was given it.
     *
     * @param batches        its batches
     * @param name           its class's simple name, for messages
     * @param asyncSupported whether it may be read from a background thread
     * @param resetSupported whether it can be reset
     * @param reset          resets it
     * @param wrongFit       the refusal of the fit called for this model, or null
     */
    record Given(Iterator<?> batches, String name, boolean asyncSupported, boolean resetSupported, Runnable reset,
                 String wrongFit) {

        static Given of(DataSetIterator it) {
            return new Given(it, it.getClass().getSimpleName(), it.asyncSupported(), it.resetSupported(), it::reset, null);
        }

        static Given of(MultiDataSetIterator it, ModelReplica model) {
            return new Given(it, it.getClass().getSimpleName(), it.asyncSupported(), it.resetSupported(), it::reset,
                    model instanceof ModelReplica.Graph ? null : "fit(MultiDataSetIterator) needs a ComputationGraph;"
                            + " this wrapper holds a " + model.model().getClass().getSimpleName()
                            + " (fix: use fit(DataSetIterator))");
        }
    }

    /**
     * What every rank agreed to go on with.
     *
     * @param listeners       the model's listeners, checked
     * @param batchesSkipped  batches read and dropped: trained before the checkpoint resumed from
     * @param examplesSkipped their examples
     */
    record Agreed(ModelListeners listeners, long batchesSkipped, long examplesSkipped) {
    }

    /**
     * This rank's checks, then every rank's verdict agreed (collective in group mode, once per fit). An iterator with no
     * next batch is reset first, as DL4J's {@code fit} does, once its other checks passed.
     *
     * @param resume where the fit starts: the batches (and examples) of the epoch a restored checkpoint had trained
     * @throws IllegalArgumentException on every rank when any refused (thread mode: this rank's own refusal)
     * @throws IllegalStateException    on every rank when any failed otherwise, or refused a listener
     */
    static Agreed agree(Given given, DataParallelSettings settings, ModelReplica model, ResumePosition resume) {
        FitAgreement start = resume.fitStart(settings.group(), layoutOf(model), true);
        ModelListeners listeners = start.agree(() -> {
            if (given.wrongFit() != null) {
                throw new IllegalArgumentException(given.wrongFit());
            }
            requirePrefetchable(settings.prefetchBuffer(), given);
            ModelListeners l = ModelListeners.of(model); // refuses what it cannot honour before anything changes
            refuseListeners(settings, l);
            if (!given.batches().hasNext() && given.resetSupported()) {
                given.reset().run();
            }
            start.skip(given.batches(), MicroBatches::examples);
            return l;
        }, given.resetSupported() ? given.reset() : null);
        return new Agreed(listeners, start.skipped(), start.examplesSkipped());
    }

    /** The model's layout, for the agreement: a tensor-parallel rank's spans its tp group; one not attached, plain. */
    private static CheckpointLayout layoutOf(ModelReplica model) {
        try {
            return CheckpointLayout.of(model.model());
        } catch (IllegalStateException notAttached) {
            return CheckpointLayout.plain(); // its tp group unknown: agreed over the trainer's group alone
        }
    }

    /**
     * Refuses to prefetch from an iterator that says it must not be read from another thread
     * ({@code asyncSupported() == false}: it is asynchronous itself, like DL4J's
     * {@code AsyncDataSetIterator}, or shielded from it, like {@code AsyncShieldDataSetIterator}).
     * ParallelWrapper silently reads such an iterator on the caller's thread instead.
     */
    private static void requirePrefetchable(int prefetchBuffer, Given given) {
        if (prefetchBuffer > 0 && !given.asyncSupported()) {
            throw new IllegalArgumentException("prefetchBuffer=" + prefetchBuffer + " reads the iterator on a"
                    + " background thread, but iterator=" + given.name() + " has asyncSupported()=false"
                    + " (it is asynchronous already or must be read from one thread); expected an iterator that supports"
                    + " asynchronous reading (fix: prefetchBuffer(0), which reads the next step's batches on the calling"
                    + " thread while the workers compute, or pass the iterator it wraps)");
        }
    }

    /** Refuses listeners the wrapper cannot call as it is configured (accumulation, sharding, group mode). */
    private static void refuseListeners(DataParallelSettings settings, ModelListeners listeners) {
        SymmemParallelWrapper.refuseListenersThatNeedOnePass(settings.accumulation(), listeners);
        if (settings.group() != null && settings.sharding() != null && !listeners.isEmpty()) {
            throw new IllegalStateException("listeners with sharding=" + settings.sharding() + " in group mode: before"
                    + " each call the model must gather every rank's updater-state shard, a collective that every rank"
                    + " would have to run at every step, listeners or not; expected no listeners (fix: drop them, use a"
                    + " stepListener, which sees the step's report on every rank, or train as threads of one JVM)");
        }
        if (settings.sharding() == ZeroStage.PARAMETERS && !listeners.isEmpty()) {
            throw new IllegalStateException("listeners with sharding=PARAMETERS: DL4J's listeners read the whole model"
                    + " (parameters, gradient) at every step, which no worker holds in ZeRO stage 3; expected no listeners"
                    + " (fix: drop them and use a stepListener, which sees the step's report, or sharding(GRADIENTS))");
        }
        if (settings.group() != null && listeners.needsActivations()) {
            throw new IllegalStateException("a listener that overrides onForwardPass in group mode: each rank holds only"
                    + " its own batch's activations, not the step's merged batch's; expected listeners that read the score,"
                    + " gradient, parameters and counters (fix: drop that listener, or train as threads of one JVM)");
        }
    }
}
