package org.symmem4j.dl4j.pipeline;

import java.util.Arrays;
import java.util.Objects;
import org.deeplearning4j.nn.conf.dropout.IDropout;
import org.deeplearning4j.nn.workspace.LayerWorkspaceMgr;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.parallel.Invariants;

/**
 * A layer's dropout (any DL4J {@link IDropout}: dropout, Gaussian dropout or noise, alpha dropout,
 * spatial dropout) with one mask per microbatch, drawn reproducibly. Pipeline stages put it in place of
 * the layer's own dropout in their copy of the network.
 *
 * <p><b>Definition.</b> In the step at iteration {@code t}, layer {@code l} (its index in the whole
 * network) draws the mask of microbatch {@code k} as the layer's dropout draws it for that
 * microbatch's activations alone — a {@code [rows of k x ...]} mask, as a {@code fit} call on that
 * microbatch would draw it — with ND4J's random generator of the drawing thread seeded with
 * {@link #seed(long, int, long, int) seed(s, l, t, k)} just before, {@code s} being the layer
 * configuration's seed. Every microbatch thus gets its own mask, independent of the others', and the
 * same mask however the schedule orders the passes and whichever rank runs the layer. DL4J's own
 * {@code fit} on the whole batch draws one mask for all rows from the thread's unseeded stream, so
 * it is not equal to a pipeline step with dropout, except in distribution; the equivalence test
 * compares the pipeline with plain DL4J forward and backward passes per microbatch that draw these
 * masks.
 *
 * <p><b>Why a copy per microbatch.</b> DL4J's dropout keeps its latest mask for the backward pass. A
 * stage runs several microbatches' forwards before their backwards, so each microbatch draws into its
 * own copy of the dropout ({@link #microbatch(int)} selects it). Layers whose backward applies the
 * dropout again (every {@code BaseLayer}: its input is restored before the backward) redraw the
 * identical mask from the same seed; a {@code DropoutLayer} uses the mask its copy kept.
 */
public final class MicrobatchDropout implements IDropout {

    /** The layer's dropout, copied per microbatch and never drawn into. */
    private final IDropout prototype;
    /** The seed of the layer's configuration. */
    private final long layerSeed;
    /** The layer's index in the whole network. */
    private final int layer;
    /** One copy of the prototype per microbatch in flight. */
    private IDropout[] perMicrobatch = new IDropout[0];
    /** The microbatch whose copy the next calls use; -1 before the first {@link #microbatch(int)}. */
    private int microbatch = -1;

    /**
     * Wraps a layer's dropout for pipelined training.
     *
     * @param dropout   the layer's dropout (copied, never drawn into)
     * @param layerSeed the seed of the layer's configuration
     * @param layer     the layer's index in the whole network
     */
    public MicrobatchDropout(IDropout dropout, long layerSeed, int layer) {
        this.prototype = Objects.requireNonNull(dropout, "dropout").clone();
        this.layerSeed = layerSeed;
        this.layer = layer;
    }

    /**
     * The seed of layer {@code layer}'s mask for {@code microbatch} at {@code iteration}: SplitMix64's
     * finalizer over the four values, so nearby iterations, layers and microbatches get unrelated
     * streams.
     *
     * @param layerSeed  the seed of the layer's configuration
     * @param layer      the layer's index in the whole network
     * @param iteration  the network's iteration count
     * @param microbatch the microbatch, from 0
     * @return the mask's seed
     */
    public static long seed(long layerSeed, int layer, long iteration, int microbatch) {
        long h = mix(layerSeed ^ 0x9E3779B97F4A7C15L);
        h = mix(h ^ layer);
        h = mix(h ^ iteration);
        return mix(h ^ microbatch);
    }

    private static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** Selects the microbatch whose mask the next calls draw and use. */
    void microbatch(int microbatch) {
        if (microbatch < 0) {
            throw Invariants.violated("microbatch=" + microbatch + " expected >= 0");
        }
        if (microbatch >= perMicrobatch.length) {
            perMicrobatch = Arrays.copyOf(perMicrobatch, microbatch + 1);
        }
        if (perMicrobatch[microbatch] == null) {
            perMicrobatch[microbatch] = prototype.clone();
        }
        this.microbatch = microbatch;
    }

    /**
     * The wrapped dropout configuration.
     *
     * @return the layer's own dropout
     */
    public IDropout dropout() {
        return prototype;
    }

    /**
     * The layer's index in the whole network.
     *
     * @return the layer index
     */
    public int layer() {
        return layer;
    }

    @Override
    public INDArray applyDropout(INDArray inputActivations, INDArray result, int iteration, int epoch,
                                 LayerWorkspaceMgr workspaceMgr) {
        IDropout current = current("applyDropout");
        // the draw uses the calling thread's generator (ND4J's is thread-local): seed it for this mask
        Nd4j.getRandom().setSeed(seed(layerSeed, layer, iteration, microbatch));
        return current.applyDropout(inputActivations, result, iteration, epoch, workspaceMgr);
    }

    @Override
    public INDArray backprop(INDArray gradAtOutput, INDArray gradAtInput, int iteration, int epoch) {
        return current("backprop").backprop(gradAtOutput, gradAtInput, iteration, epoch);
    }

    @Override
    public void clear() {
        for (IDropout d : perMicrobatch) {
            if (d != null) {
                d.clear();
            }
        }
    }

    @Override
    public MicrobatchDropout clone() {
        return new MicrobatchDropout(prototype, layerSeed, layer);
    }

    private IDropout current(String call) {
        if (microbatch < 0) {
            throw Invariants.violated("layer " + layer + " dropout: " + call + " before a microbatch was selected"
                    + " (a pipeline stage selects it before every pass)");
        }
        return perMicrobatch[microbatch];
    }

    @Override
    public String toString() {
        return "MicrobatchDropout[layer=" + layer + ", " + prototype + "]";
    }
}
