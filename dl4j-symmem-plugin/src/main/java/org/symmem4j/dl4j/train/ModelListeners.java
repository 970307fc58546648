package org.symmem4j.dl4j.train;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.optimize.api.BaseTrainingListener;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.nd4j.linalg.factory.Nd4j;

/**
 * The {@link TrainingListener}s attached to the user's model, called as DL4J's own {@code fit}
 * calls them for one model trained on the merged batch of each step (every worker's examples),
 * on the thread that called the trainer's {@code fit}, with the user's model. Written for the
 * data-parallel wrapper, whose terms (workers, replicas) it uses below; the pipeline trainer calls it
 * the same way, its stages standing for the replicas ({@code PipelineParallelTrainer} says where it
 * differs):
 * <ul>
 *   <li>{@code onEpochStart} / {@code onEpochEnd}: at the start and end of every trainer
 *       {@code fit(iterator)}, which is an epoch as DL4J's {@code fit(iterator)} is (at the end the
 *       model holds the fitted state; the epoch count moves on after {@code onEpochEnd}, as in DL4J);</li>
 *   <li>per step, once the workers finished it, in DL4J's order: {@code onForwardPass} with the
 *       merged batch's activations (each worker's, concatenated in worker order: for a network
 *       without BatchNorm the activations one model computes on the merged batch; with BatchNorm,
 *       normalized by each worker's batch as trained), {@code onBackwardPass}, then
 *       {@code onGradientCalculation} with {@code model.gradient()} holding the merged batch's
 *       gradient as DL4J shows it there (summed over the examples, state updates merged; the
 *       parameters still those before the step), then {@code iterationDone(model, iteration, epoch)}
 *       with the parameters, updater state and counters after the step, {@code model.gradient()}
 *       holding the update the step applied, and {@code model.score()} the merged batch's score
 *       (mean loss over all the step's examples plus DL4J's regularization term). The model's
 *       input and labels are the merged batch throughout (listeners read its size).</li>
 * </ul>
 * Differences from a plain {@code fit}: the per-step calls come after the step rather than
 * between its phases, so a listener that times them measures the caller's thread, not the
 * workers; a step skipped for a non-finite gradient ({@code NonFiniteGradients.SKIP_STEP}) calls
 * no listener, since no iteration happened; DL4J applies layer constraints after
 * {@code iterationDone}, the replicas before it, so with constraints the listeners see the
 * constrained parameters. A listener that changes the model's parameters or updater state in
 * {@code iterationDone} is honoured: the replicas take the change before the next step.
 *
 * <p>Serving a step costs, on the caller's thread while the workers wait: a copy of the step's
 * batches into one, of the parameters, the update and the updater state into the model, and, only
 * for listeners that override them, of the activations and the merged gradient.
 */
public final class ModelListeners {

    private final List<TrainingListener> listeners;
    private final boolean needsActivations;
    private final boolean needsGradient;

    private ModelListeners(List<TrainingListener> listeners) {
        this.listeners = listeners;
        this.needsActivations = listeners.stream().anyMatch(l -> overrides(l, "onForwardPass", Model.class, List.class)
                || overrides(l, "onForwardPass", Model.class, Map.class));
        this.needsGradient = listeners.stream().anyMatch(l -> overrides(l, "onGradientCalculation", Model.class));
    }

    /**
     * The listeners attached to {@code model} now, checked: refuses, before anything changes, a
     * listener the wrapper cannot call as plain {@code fit} would.
     *
     * @param model the user's model
     * @return its listeners
     * @throws IllegalArgumentException when the model trains with truncated BPTT and has listeners
     */
    public static ModelListeners of(ListenedModel model) {
        return of(model, model.listeners());
    }

    /**
     * {@link #of(ListenedModel)} for {@code attached}, listeners about to be attached to {@code model}.
     *
     * @param model    the user's model
     * @param attached the listeners it will have
     * @return those listeners
     * @throws IllegalArgumentException when the model trains with truncated BPTT and {@code attached} is not empty
     */
    public static ModelListeners of(ListenedModel model, List<TrainingListener> attached) {
        check(model, attached);
        return new ModelListeners(List.copyOf(attached));
    }

    /** Refuses {@code attached}, listeners for {@code model}, if the wrapper cannot call them as plain {@code fit} would. */
    private static void check(ListenedModel model, List<TrainingListener> attached) {
        if (!attached.isEmpty() && model.truncatedBptt()) {
            throw new IllegalArgumentException("listeners=" + names(attached) + " on a network trained with truncated"
                    + " BPTT cannot be called as fit() calls them: DL4J updates once per time segment and calls"
                    + " iterationDone after each, while the wrapper's workers finish a whole batch before the listeners"
                    + " run, so there is no model state for each segment to show them; expected=no listeners, or"
                    + " BackpropType.Standard (fix: remove the listeners with model.setListeners() before building the"
                    + " wrapper, and use stepListener(...) for per-step reports)");
        }
    }

    private static String names(List<TrainingListener> listeners) {
        return listeners.stream().map(l -> l.getClass().getSimpleName()).toList().toString();
    }

    /** Whether {@code listener}'s class implements {@code method} itself, rather than keeping BaseTrainingListener's no-op. */
    private static boolean overrides(TrainingListener listener, String method, Class<?>... parameters) {
        try {
            Method m = listener.getClass().getMethod(method, parameters);
            return m.getDeclaringClass() != BaseTrainingListener.class;
        } catch (NoSuchMethodException e) {
            throw new IllegalStateException("TrainingListener has no " + method + ": not DL4J 1.0.0-M2.1's interface"
                    + " (fix: use DL4J 1.0.0-M2.1, the version symmem4j is built and tested against)", e);
        }
    }

    /** {@return whether there are no listeners} */
    public boolean isEmpty() {
        return listeners.isEmpty();
    }

    /** {@return the listeners, in the order they are called} */
    public List<TrainingListener> listeners() {
        return listeners;
    }

    /** {@return whether some listener reads activations (overrides onForwardPass): workers then keep copies of theirs} */
    public boolean needsActivations() {
        return needsActivations;
    }

    /** {@return whether some listener reads the gradient before the update (overrides onGradientCalculation)} */
    public boolean needsGradient() {
        return needsGradient;
    }

    /**
     * Calls every listener's {@code onEpochStart}.
     *
     * @param model the user's model
     */
    public void epochStart(Model model) {
        for (TrainingListener l : listeners) {
            l.onEpochStart(model);
        }
    }

    /**
     * Calls every listener's {@code onEpochEnd}.
     *
     * @param model the user's model
     */
    public void epochEnd(Model model) {
        for (TrainingListener l : listeners) {
            l.onEpochEnd(model);
        }
    }

    /** What a finished step gives the listeners. */
    public interface Step {
        /** {@return the step's batches, in worker order (active workers only)} */
        List<Object> batches();

        /** {@return each active worker's activations as DL4J passed them to onForwardPass (List or Map), when kept} */
        List<Object> activations();

        /** {@return the merged batch's score} */
        double score();

        /**
         * Writes the merged batch's gradient, as one model's onGradientCalculation sees it, into {@code target}.
         *
         * @param target the model's gradient view
         */
        void assembleGradient(INDArray target);

        /** Gives the model the replicas' state after the step: parameters, updater state, counters, the update in its gradient view. */
        void syncModel();

        /** Gives the replicas the model's state if a listener changed it. */
        void syncReplicasIfChanged();
    }

    /**
     * Calls the listeners for one finished step; the model's {@code gradient()} must show its gradient view.
     *
     * @param model the user's model
     * @param step  the finished step
     */
    public void step(ListenedModel model, Step step) {
        Model m = model.model();
        model.setInputAndLabels(merge(step.batches()));
        if (needsActivations) {
            Object activations = concatenate(step.activations());
            try (MemoryWorkspace ws = Nd4j.getWorkspaceManager().scopeOutOfWorkspaces()) {
                for (TrainingListener l : listeners) {
                    if (activations instanceof List<?> list) {
                        @SuppressWarnings("unchecked")
                        List<INDArray> layers = (List<INDArray>) list;
                        l.onForwardPass(m, layers);
                    } else {
                        @SuppressWarnings("unchecked")
                        Map<String, INDArray> layers = (Map<String, INDArray>) activations;
                        l.onForwardPass(m, layers);
                    }
                }
            }
        }
        model.setScore(step.score());
        for (TrainingListener l : listeners) {
            l.onBackwardPass(m);
        }
        if (needsGradient) {
            step.assembleGradient(model.gradientView());
            for (TrainingListener l : listeners) {
                l.onGradientCalculation(m);
            }
        }
        step.syncModel();
        // DL4J calls iterationDone with the counters before it increments them
        int iteration = model.iterationCount() - 1;
        model.setIterationCount(iteration);
        for (TrainingListener l : listeners) {
            l.iterationDone(m, iteration, model.epochCount());
        }
        model.setIterationCount(iteration + 1);
        step.syncReplicasIfChanged();
    }

    private static Object merge(List<Object> batches) {
        if (batches.size() == 1) {
            return batches.getFirst();
        }
        if (batches.getFirst() instanceof DataSet) {
            List<DataSet> sets = new ArrayList<>();
            batches.forEach(b -> sets.add((DataSet) b));
            return org.nd4j.linalg.dataset.DataSet.merge(sets);
        }
        List<MultiDataSet> sets = new ArrayList<>();
        batches.forEach(b -> sets.add((MultiDataSet) b));
        return org.nd4j.linalg.dataset.MultiDataSet.merge(sets);
    }

    /** The workers' activations concatenated along the examples, per layer, in worker order. */
    private static Object concatenate(List<Object> perWorker) {
        if (perWorker.getFirst() instanceof List<?> first) {
            List<INDArray> out = new ArrayList<>();
            for (int i = 0; i < first.size(); i++) {
                INDArray[] parts = new INDArray[perWorker.size()];
                for (int w = 0; w < parts.length; w++) {
                    parts[w] = (INDArray) ((List<?>) perWorker.get(w)).get(i);
                }
                out.add(concat(parts, "layer " + i));
            }
            return out;
        }
        Map<String, INDArray> out = new LinkedHashMap<>();
        for (Object key : ((Map<?, ?>) perWorker.getFirst()).keySet()) {
            INDArray[] parts = new INDArray[perWorker.size()];
            for (int w = 0; w < parts.length; w++) {
                parts[w] = (INDArray) ((Map<?, ?>) perWorker.get(w)).get(key);
            }
            out.put((String) key, concat(parts, "vertex " + key));
        }
        return out;
    }

    private static INDArray concat(INDArray[] parts, String what) {
        if (parts.length == 1) {
            return parts[0];
        }
        for (INDArray p : parts) {
            if (p.rank() != parts[0].rank()) {
                throw new IllegalStateException("activations of " + what + " differ in rank between workers: cannot form the"
                        + " merged batch's activations for onForwardPass (fix: give every batch of the iterator features"
                        + " of the same rank)");
            }
        }
        return Nd4j.concat(0, parts);
    }
}
