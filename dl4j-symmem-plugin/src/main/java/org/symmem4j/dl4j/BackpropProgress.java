package org.symmem4j.dl4j;

/**
 * Where a replica's backprop reports progress: each {@link BackpropSignalPreProcessor} calls
 * {@link #layerWritten} on the worker's thread right after its layer wrote its gradient. One per
 * replica; the replica is built with it, and the worker's {@link GradientAveraging} listens once it
 * exists. Stage 3 ({@link FullySharded}) also listens to the forward pass ({@link #listenForward}).
 */
final class BackpropProgress {

    /** Told, on the thread running backprop, that the layer named {@code key} has written its gradient. */
    @FunctionalInterface
    interface Listener {
        void layerWritten(String key);
    }

    // Written once by the worker thread before its first step, read by the same thread during
    // backprop; volatile only so a listener set from another thread in tests is seen.
    private volatile Listener listener;
    /** Told before a layer's forward pass (its input preprocessor's forward); null unless stage 3 listens. */
    private volatile Listener forwardListener;

    void listen(Listener l) {
        this.listener = l;
    }

    /** {@code l} is told, on the thread running the forward pass, just before each hooked layer's forward. */
    void listenForward(Listener l) {
        this.forwardListener = l;
    }

    /** Told, on the thread running the forward pass, that the layer named {@code key} is about to run its forward. */
    void layerStarting(String key) {
        Listener l = forwardListener;
        if (l != null) {
            l.layerWritten(key);
        }
    }

    void layerWritten(String key) {
        Listener l = listener;
        if (l != null) {
            l.layerWritten(key);
        }
    }
}
