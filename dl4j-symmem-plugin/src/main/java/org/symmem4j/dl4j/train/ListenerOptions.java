package org.symmem4j.dl4j.train;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.function.Consumer;
import org.deeplearning4j.core.storage.StatsStorageRouter;
import org.deeplearning4j.optimize.api.TrainingListener;

/**
 * The DL4J listeners a trainer's builder attaches to the model at {@code build()}, and the router for those that
 * send reports ({@code ParallelWrapper.setListeners(StatsStorageRouter, ...)}): kept and checked in one place for
 * every trainer. A trainer's builder owns one and keeps its public {@code listeners(...)} methods; their bodies
 * delegate here.
 */
public final class ListenerOptions {

    private final List<TrainingListener> listeners = new ArrayList<>();
    private StatsStorageRouter router;
    private boolean hadNull;

    /** No listeners, no router. */
    public ListenerOptions() {
    }

    /**
     * Adds {@code listeners}, each once (a null is refused at {@link #attachTo}).
     *
     * @param listeners DL4J listeners
     */
    public void add(TrainingListener... listeners) {
        if (listeners == null) {
            hadNull = true;
            return;
        }
        for (TrainingListener l : listeners) {
            if (l == null) {
                hadNull = true;
            } else if (this.listeners.stream().noneMatch(x -> x == l)) {
                this.listeners.add(l);
            }
        }
    }

    /**
     * The router of the listeners that send reports and have none of their own.
     *
     * @param router where {@code RoutingIterationListener}s without a router report
     * @throws NullPointerException when {@code router} is null
     */
    public void router(StatsStorageRouter router) {
        this.router = Objects.requireNonNull(router, "router (use listeners(TrainingListener...) for none)");
    }

    /**
     * {@link #attachTo}'s checks alone, attaching nothing: a trainer in group mode runs them before its ranks agree on
     * what each refused, and attaches only once every rank accepted.
     *
     * @param model  the model the listeners would be attached to
     * @param refuse throws for a listener the trainer cannot call
     * @return the model's listeners, then those this would add
     * @throws IllegalArgumentException when a null was given, or {@code refuse} refuses
     */
    public List<TrainingListener> check(ListenedModel model, Consumer<ModelListeners> refuse) {
        if (hadNull) {
            throw new IllegalArgumentException("listeners(...) was given null: expected TrainingListener instances"
                    + " (fix: leave the null out)");
        }
        List<TrainingListener> all = new ArrayList<>(model.listeners());
        List<TrainingListener> adding = listeners.stream().filter(l -> all.stream().noneMatch(x -> x == l)).toList();
        all.addAll(adding);
        refuse.accept(ModelListeners.of(model, all)); // ModelListeners.of refuses truncated BPTT with any
        return all;
    }

    /**
     * Attaches the listeners to {@code model} and routes the reporting ones, after checking everything
     * ({@link ModelListeners#of(ListenedModel, List)}, then {@code refuse} with the model's and these listeners
     * together, then the routing), so a refusal leaves the model's listeners as they were.
     *
     * @param model  the model the trainer trains
     * @param refuse the trainer's own checks of the listeners it would call; throws to refuse
     * @throws IllegalArgumentException when a listener was null, or a routing listener has no router
     */
    public void attachTo(ListenedModel model, Consumer<ModelListeners> refuse) {
        List<TrainingListener> all = check(model, refuse);
        List<TrainingListener> adding = List.copyOf(all.subList(model.listeners().size(), all.size()));
        StatsRouting.route(router, all);
        for (TrainingListener l : adding) {
            model.model().addListeners(l);
        }
    }
}
