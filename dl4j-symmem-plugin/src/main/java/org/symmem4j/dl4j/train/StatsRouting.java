package org.symmem4j.dl4j.train;

import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.core.storage.StatsStorageRouter;
import org.deeplearning4j.core.storage.listener.RoutingIterationListener;
import org.deeplearning4j.optimize.api.TrainingListener;

/**
 * DL4J's stats routing as {@code ParallelWrapper.setListeners(StatsStorageRouter, ...)} does it: a
 * listener that sends its reports somewhere ({@code RoutingIterationListener}, such as the UI's
 * {@code StatsListener}) and has no router of its own gets the wrapper's; one with its own keeps it.
 * Unlike ParallelWrapper, which only warns, a routing listener left with no router at all is
 * refused: it would fail at its first report.
 *
 * <p>The routing interfaces live in {@code deeplearning4j-core}, which the plugin leaves to the
 * user's classpath: this class is the only one that touches them, and only after checking they are
 * there (without them no listener can be a routing one).
 */
public final class StatsRouting {

    private static final boolean AVAILABLE = available();

    private StatsRouting() {
    }

    private static boolean available() {
        try {
            Class.forName("org.deeplearning4j.core.storage.listener.RoutingIterationListener", false,
                    StatsRouting.class.getClassLoader());
            return true;
        } catch (ClassNotFoundException | LinkageError e) {
            return false;
        }
    }

    /**
     * Gives {@code router} (may be null) to every routing listener among {@code listeners} that has
     * none, after checking that none is left without one; changes nothing when it refuses.
     */
    public static void route(StatsStorageRouter router, List<TrainingListener> listeners) {
        if (!AVAILABLE) {
            return;
        }
        List<RoutingIterationListener> unrouted = new ArrayList<>();
        for (TrainingListener l : listeners) {
            if (l instanceof RoutingIterationListener r && r.getStorageRouter() == null) {
                unrouted.add(r);
            }
        }
        if (router == null && !unrouted.isEmpty()) {
            throw new IllegalArgumentException("listeners=" + unrouted.stream().map(l -> l.getClass().getSimpleName()).toList()
                    + " send reports to a StatsStorageRouter but have none: expected a router on each such listener,"
                    + " found none (fix: builder.listeners(statsStorage, listeners...), as ParallelWrapper.setListeners("
                    + "statsStorage, ...), or build the listener with its storage, e.g. new StatsListener(statsStorage))");
        }
        for (RoutingIterationListener r : unrouted) {
            r.setStorageRouter(router);
        }
    }
}
