package org.symmem4j.dl4j.pipeline;

import java.util.List;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.deeplearning4j.optimize.listeners.CheckpointListener;
import org.deeplearning4j.optimize.listeners.EvaluativeListener;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.dl4j.train.ModelListeners;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Invariants;

/**
 * The model's DL4J listeners in group mode (one JVM per rank): called on <b>every rank</b>, once per step, with the
 * step's loss that every rank agreed on (the same bits on every rank, {@link GroupExchange#afterStep}), and without a
 * collective of their own, so the ranks may attach different listeners (a {@code ScoreIterationListener} on rank 0
 * alone prints one line per step). What the model shows them ({@link #step}):
 * <ul>
 *   <li>{@code iterationDone}: {@code score()} the step's loss (the whole batch's, as thread mode reports it), the
 *       iteration and epoch counters after the step, the batch as input and labels; the parameters of <i>this rank's
 *       stages</i> after the step (and their updater state, except with {@code sharding(...)}, whose state is cut
 *       over the dp replicas), {@code gradient()} those stages' update; the other ranks' stages keep what the model
 *       held at the start of the {@code fit} (their update reads zero);</li>
 *   <li>{@code onGradientCalculation}: this rank's stages' gradient of the step (summed over the whole batch), zeros
 *       for the others';</li>
 *   <li>{@code onEpochStart} / {@code onEpochEnd}: the whole network, as in thread mode: at the start of a
 *       {@code fit(iterator)} the model holds the state the fit starts from, and at its end every rank's model has
 *       gathered every stage before {@code onEpochEnd} (the gather a {@code fit} ends with anyway).</li>
 * </ul>
 * A listener that changes this rank's stages' parameters in {@code iterationDone} is honoured (the stages take the
 * change before the next step, with no collective), so it must change them alike on every rank that holds the stage
 * (its dp replicas). Refused before anything runs ({@link #refuse}), since what they read is the whole network during
 * the step: a listener overriding {@code onForwardPass} (the whole network's activations), DL4J's
 * {@code CheckpointListener} and {@code EvaluativeListener} (they save or evaluate the whole network), and any listener
 * with tensor parallelism (a rank holds a shard of its stages, not the layout of the model).
 */
final class PipelineGroupListeners {

    private PipelineGroupListeners() {
    }

    /**
     * Refuses, in group mode, the listeners that read the whole network during a step (see the class javadoc).
     *
     * @param group          the trainer's group, or null in thread mode (nothing refused here)
     * @param listeners      the model's listeners
     * @param tensorParallel tensor-parallel ranks per pipeline rank
     */
    static void refuse(Group group, ModelListeners listeners, int tensorParallel) {
        if (group == null || listeners.isEmpty()) {
            return;
        }
        if (tensorParallel > 1) {
            throw new IllegalStateException("listeners=" + names(listeners.listeners()) + " in group mode with"
                    + " tensorParallel=" + tensorParallel + ": a rank holds its shard of its stages, not the layers of"
                    + " the model the listeners are shown; expected no DL4J listeners with tensor parallelism in group"
                    + " mode (fix: a stepListener, which sees the step's report on every rank, or train as threads of"
                    + " one JVM, where the listeners see the shards joined)");
        }
        if (listeners.needsActivations()) {
            throw new IllegalStateException("a listener that overrides onForwardPass in group mode: a pipeline rank"
                    + " computes only its own stages' activations, and the model's forward pass needs every stage's"
                    + " parameters of the step, which no rank holds during a fit; expected listeners that read the"
                    + " score, counters, parameters or gradient (fix: drop that listener, or train as threads of one"
                    + " JVM)");
        }
        for (TrainingListener l : listeners.listeners()) {
            if (l instanceof CheckpointListener || l instanceof EvaluativeListener) {
                throw new IllegalStateException("listener=" + l.getClass().getSimpleName() + " in group mode: it "
                        + (l instanceof CheckpointListener ? "saves" : "evaluates") + " the whole network during the fit,"
                        + " while a rank's model holds only its own stages' state of the step; expected listeners that"
                        + " read the score, counters or this rank's stages (fix: "
                        + (l instanceof CheckpointListener ? "checkpointEvery(k, dir) on the trainer's builder"
                        : "evaluate the model after fit(), when every rank's model holds the whole network")
                        + ", or train as threads of one JVM)");
            }
        }
    }

    private static String names(List<TrainingListener> listeners) {
        return listeners.stream().map(l -> l.getClass().getSimpleName()).toList().toString();
    }

    /**
     * A finished step as this rank's listeners see it (see the class javadoc): local, no collective.
     *
     * @param model            the user's model
     * @param batch            the step's batch, as the caller gave it (the same on every rank: agreed)
     * @param score            the step's loss, agreed by every rank
     * @param stages           this rank's replica's stages: its own held, the others hollow
     * @param withUpdaterState whether the held stages' updater state is shown (not when it is cut over the replicas)
     * @return the step for {@link ModelListeners#step}
     */
    static ModelListeners.Step step(PipelineModel model, Object batch, double score, List<Dl4jPipelineStage> stages,
                                    boolean withUpdaterState) {
        return new ModelListeners.Step() {
            @Override
            public List<Object> batches() {
                return List.of(batch);
            }

            @Override
            public List<Object> activations() {
                throw Invariants.violated("onForwardPass listeners are refused in group mode (refuse) before training");
            }

            @Override
            public double score() {
                return score;
            }

            @Override
            public void assembleGradient(INDArray target) {
                model.gatherGradients(stages, true, target);
            }

            @Override
            public void syncModel() {
                model.takeHeldFrom(stages, withUpdaterState);
                // after DL4J's step the gradient view holds the update
                model.gatherGradients(stages, false, model.gradientView());
            }

            @Override
            public void syncReplicasIfChanged() {
                if (!model.holds(stages, withUpdaterState)) {
                    model.giveTo(stages, withUpdaterState); // the held stages only; every stage its counters
                }
            }
        };
    }
}
