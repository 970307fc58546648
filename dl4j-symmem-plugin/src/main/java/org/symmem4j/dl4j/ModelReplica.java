package org.symmem4j.dl4j;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.Trainable;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.InputPreProcessor;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.graph.vertex.GraphVertex;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.dl4j.train.ListenedModel;
import org.deeplearning4j.nn.updater.BaseMultiLayerUpdater;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.concurrency.AffinityManager;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Invariants;

/**
 * The operations the wrapper needs from a DL4J network, for {@link MultiLayerNetwork} and
 * {@link ComputationGraph} alike: flat parameter, gradient and updater-state views, counters,
 * cloning and one training step.
 */
sealed interface ModelReplica extends ListenedModel permits ModelReplica.Mln, ModelReplica.Graph {

    static ModelReplica of(Model model) {
        if (model instanceof MultiLayerNetwork m) {
            return new Mln(m);
        }
        if (model instanceof ComputationGraph g) {
            return new Graph(g);
        }
        throw new IllegalArgumentException("expected a MultiLayerNetwork or ComputationGraph; found "
                + (model == null ? "null" : model.getClass().getName())
                + " (fix: build the model as a MultiLayerNetwork or ComputationGraph, the two DL4J models symmem4j trains)");
    }

    Model model();

    /** Initializes parameters and the flat gradient view if the network has not been initialized yet. */
    static void ensureInitialized(ModelReplica replica) {
        switch (replica) {
            case Mln m -> {
                if (ConfigurationStart.isHollow(m)) {
                    return; // stage 3 from a configuration: its views lie over reserved memory (initGradientsView would fill one)
                }
                m.net().init();
                m.net().initGradientsView();
            }
            case Graph g -> {
                if (ConfigurationStart.isHollow(g)) {
                    return; // stage 3 from a configuration, as above
                }
                g.net().init();
                g.net().initGradientsView();
            }
        }
    }

    /**
     * A training replica: a network built afresh from a copy of the configuration (not
     * {@code clone()}: DL4J's ComputationGraph clones share their listener list), with the same
     * parameters, updater state and counters, and with DL4J's division of the gradient by the
     * minibatch size switched off, because the wrapper divides the all-reduced sum by the examples
     * of the whole step instead (see {@link DataParallelWorker}).
     */
    default ModelReplica newReplica() {
        return newReplica(null, false, null);
    }

    /**
     * A replica of this model: {@link #newReplica()}, {@link #newShardedReplica()} (with
     * {@code sharded}) or {@link #newReplicaWithBackpropSignals} (with a {@code progress}), and with
     * its flat gradient view placed in {@code gradientHome} when that is given
     * ({@link #placeGradientView}), before anything reads the view or builds an updater on it.
     *
     * @param progress     where backprop reports written layers, or null
     * @param sharded      whether DL4J's own updater is left out (sharded training)
     * @param gradientHome memory for the gradient view (the view's length times its element size), or null
     * @return the replica
     */
    default ModelReplica newReplica(BackpropProgress progress, boolean sharded, MemorySegment gradientHome) {
        ModelReplica copy = progress == null ? blankCopy() : blankCopyWithBackpropSignals(progress);
        if (gradientHome != null) {
            copy.placeGradientView(gradientHome);
        }
        if (sharded) {
            copy.copyParamsAndCountersFrom(this);
        } else {
            copy.copyStateFrom(this);
        }
        copy.disableMinibatchDivision();
        return copy;
    }

    /**
     * Moves this network's flat gradient view into {@code home} (zeroed), which DL4J then fills
     * in backprop: memory that other processes map, so the gradient is all-reduced where it lies,
     * with no copy in or out. Every layer's gradient view is re-pointed at its part of it
     * ({@code setBackpropGradientsViewArray}), and the network's own reference to the flat view
     * (its protected {@code flattenedGradients}, which {@code getGradientsViewArray} returns and
     * the updater reads) is set too. Before the updater exists only: DL4J's updater keeps views of
     * the gradient it was built on.
     *
     * @param home memory of at least the view's length times its element size, 8-byte aligned
     * @throws IllegalStateException when the updater exists already (a bug: place the view first)
     * @throws IllegalArgumentException when {@code home} is too small
     */
    void placeGradientView(MemorySegment home);

    /**
     * A row vector of {@code length} elements of {@code type} over {@code home}, which ND4J wraps
     * without owning (its buffer is externalized: ND4J never frees that memory).
     */
    static INDArray arrayOver(MemorySegment home, DataType type, long length) {
        return org.symmem4j.dl4j.nd4j.SegmentArrays.over(home, type, length);
    }

    /** The zeroed array over {@code home} that replaces {@code old} as a network's flat gradient view ({@link #placeGradientView}). */
    private static INDArray gradientViewIn(MemorySegment home, INDArray old, boolean updaterBuilt) {
        if (updaterBuilt) {
            throw Invariants.violated("placeGradientView after the updater was built: it keeps views of the old"
                    + " gradient (place the view first)");
        }
        INDArray view = arrayOver(home, old.dataType(), old.length());
        view.assign(0);
        return view;
    }

    /** Sets a network's protected reference to its flat gradient view ({@link #placeGradientView}). */
    static void setFlattenedGradients(Object network, Class<?> type, INDArray view) {
        try {
            java.lang.reflect.Field f = type.getDeclaredField("flattenedGradients");
            f.setAccessible(true);
            f.set(network, view);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot place the gradient view of a " + type.getSimpleName() + ": its field"
                    + " flattenedGradients is not as DL4J 1.0.0-M2.1 has it (" + e + "; fix: use DL4J 1.0.0-M2.1, the"
                    + " version symmem4j is built and tested against)", e);
        } catch (RuntimeException e) { // InaccessibleObjectException: DL4J on the module path, its package not open
            throw new IllegalStateException("cannot place the gradient view of a " + type.getSimpleName() + ": " + e
                    + " (DL4J on the module path; fix: add --add-opens"
                    + " " + type.getPackageName() + "=ALL-UNNAMED, or put DL4J"
                    + " on the class path)", e);
        }
    }

    /**
     * A replica for sharded training: like {@link #newReplica()} (parameters, counters, minibatch
     * division off) but DL4J's own updater is never created, so no full-size updater state is
     * allocated; {@link #installUpdater} gives it a {@link ShardedUpdater}.
     */
    default ModelReplica newShardedReplica() {
        return newReplica(null, true, null);
    }

    /**
     * A network of the same kind built afresh from a copy of this one's configuration, initialized,
     * with its flat gradient view; nothing copied from this one yet.
     */
    ModelReplica blankCopy();

    /**
     * Like {@link #newReplica()}, and its backprop tells {@code progress} each time a layer (graph:
     * a layer vertex) has written its gradient, so sync can start on that part of the gradient
     * while backprop goes on (see {@link BackpropSignalPreProcessor}).
     */
    default ModelReplica newReplicaWithBackpropSignals(BackpropProgress progress) {
        return newReplica(progress, false, null);
    }

    /** {@link #blankCopy()} with {@link BackpropSignalPreProcessor}s installed; see {@link #newReplicaWithBackpropSignals}. */
    ModelReplica blankCopyWithBackpropSignals(BackpropProgress progress);

    /** One layer's (graph: vertex's) part of the flat gradient view, elements {@code [start, end)}. */
    record LayerSlice(String key, long start, long end) {
    }

    /**
     * The part of the flat gradient view each layer with parameters owns, keyed as the backprop
     * signals name them (layer index, or vertex name), read from the layers' own gradient views.
     */
    List<LayerSlice> layerSlices();

    /** Where {@code part}, a view into {@code whole}, starts in it, in elements. */
    static long elementOffset(INDArray whole, INDArray part) {
        long width = whole.dataType().width();
        long delta = segmentOf(part).address() - segmentOf(whole).address();
        if (delta < 0 || delta % width != 0 || delta / width + part.length() > whole.length()) {
            throw Invariants.violated("a layer's gradient view lies outside the network's flat gradient view:"
                    + " offsetBytes=" + delta + " length=" + part.length() + " flatLength=" + whole.length()
                    + " (expected DL4J's layer views into the flat view)");
        }
        return delta / width;
    }

    /**
     * Forward and backward pass over {@code batch} without the updater: the gradient view then
     * holds this batch's gradient (a sum over its examples), and {@link #score()} its loss. For
     * gradient accumulation.
     */
    void computeGradient(Object batch);

    /** Makes DL4J's optimizer call {@code sharded} where it would run its own updater. */
    void installUpdater(ShardedUpdater sharded);

    /** DL4J's multi-layer updater of this network, created (with its full state) if the network has none yet. */
    default BaseMultiLayerUpdater<?> dl4jUpdater() {
        Object u = switch (this) {
            case Mln m -> m.net().getUpdater(true);
            case Graph g -> g.net().getUpdater(true);
        };
        if (u instanceof BaseMultiLayerUpdater<?> b) {
            return b;
        }
        throw new IllegalStateException("expected DL4J's own updater (MultiLayerUpdater or ComputationGraphUpdater) on the"
                + " model; found " + (u == null ? "null" : u.getClass().getName())
                + " (fix: leave the updater to DL4J: set it with the configuration's .updater(...), not model.setUpdater)");
    }

    /**
     * The layers (graph: vertices) that have parameters, by the name DL4J's updater knows them by
     * ({@code getConfig().getLayerName()}).
     */
    default Map<String, Trainable> trainables() {
        Map<String, Trainable> out = new LinkedHashMap<>();
        List<Trainable> all = switch (this) {
            case Mln m -> List.of((Trainable[]) m.net().getLayers());
            case Graph g -> List.of((Trainable[]) g.net().getVertices());
        };
        for (Trainable t : all) {
            if (t.numParams() > 0 && out.put(t.getConfig().getLayerName(), t) != null) {
                throw new IllegalStateException("two layers are named " + t.getConfig().getLayerName() + "; expected"
                        + " unique layer names (fix: give each layer its own .name(...) in the configuration)");
            }
        }
        return out;
    }

    /**
     * Turns off the updater's division of the gradient (a sum over examples) by the minibatch
     * size. Only the network-level setting, which DL4J's updater reads: output layers keep dividing
     * their score by their batch size (some do regardless of the setting), so every replica's
     * score is its batch's mean loss plus the regularization term, whatever the output layer.
     */
    void disableMinibatchDivision();

    INDArray params();

    /** The flat gradient view that backprop fills (one contiguous buffer outside workspaces). */
    INDArray gradientView();

    /** The updater's flat state view (Adam moments, momentum, ...), created if absent; null for stateless updaters. */
    INDArray updaterState();

    int iterationCount();

    void setIterationCount(int count);

    int epochCount();

    void setEpochCount(int count);

    void fit(DataSet batch);

    void fit(MultiDataSet batch);

    void addListener(TrainingListener listener);

    double score();

    void setScore(double score);

    /** DL4J's regularization term of the score (L1, L2, ...) for the current parameters, as its score() adds it. */
    double regularizationScore();

    /** The listeners attached to the network (DL4J's getListeners()), never null. */
    List<TrainingListener> listeners();

    /** Whether the network trains with truncated backpropagation through time (several updates per batch). */
    boolean truncatedBptt();

    /** The configurations of the network's layers (graph: of its layer vertices), in the network's order. */
    default List<org.deeplearning4j.nn.conf.layers.Layer> layerConfigurations() {
        List<org.deeplearning4j.nn.conf.layers.Layer> layers = new ArrayList<>();
        switch (this) {
            case Mln m -> m.net().getLayerWiseConfigurations().getConfs().forEach(c -> layers.add(c.getLayer()));
            case Graph g -> g.net().getConfiguration().getVertices().values().forEach(v -> {
                if (v instanceof org.deeplearning4j.nn.conf.graph.LayerVertex lv && lv.getLayerConf() != null) {
                    layers.add(lv.getLayerConf().getLayer());
                }
            });
        }
        return layers;
    }

    /** The workspace mode of the network's training passes (its configuration's, read by DL4J at every fit). */
    WorkspaceMode trainingWorkspaceMode();

    /** Sets the workspace mode of the network's training passes in its configuration, as ParallelWrapper does. */
    void setTrainingWorkspaceMode(WorkspaceMode mode);

    /**
     * Sets the network's input and labels to {@code batch} (a DataSet or MultiDataSet), as DL4J's
     * fit does before an iteration; null clears them, as DL4J does after fit.
     */
    void setInputAndLabels(Object batch);

    /** Parameters and counters of {@code source} copied into this replica (not the updater state). */
    default void copyParamsAndCountersFrom(ModelReplica source) {
        params().assign(source.params());
        setIterationCount(source.iterationCount());
        setEpochCount(source.epochCount());
    }

    /** Bitwise equality of parameters, and equal counters. */
    default boolean sameParamsAndCountersAs(ModelReplica other) {
        return iterationCount() == other.iterationCount() && epochCount() == other.epochCount()
                && bitwiseEqual(params(), other.params());
    }

    /** Parameters, updater state and counters of {@code source} copied into this replica. */
    default void copyStateFrom(ModelReplica source) {
        params().assign(source.params());
        INDArray mine = updaterState();
        INDArray theirs = source.updaterState();
        if (mine != null && theirs != null) {
            mine.assign(theirs);
        }
        setIterationCount(source.iterationCount());
        setEpochCount(source.epochCount());
    }

    /** Bitwise equality of parameters and updater state, and equal counters. */
    default boolean sameStateAs(ModelReplica other) {
        return iterationCount() == other.iterationCount() && epochCount() == other.epochCount()
                && bitwiseEqual(params(), other.params()) && bitwiseEqual(updaterState(), other.updaterState());
    }

    static boolean bitwiseEqual(INDArray a, INDArray b) {
        if (a == null || b == null) {
            return a == b;
        }
        if (a.length() != b.length() || a.dataType() != b.dataType()) {
            return false;
        }
        // compared in host memory: on a GPU backend the device copy may be the newer one (a no-op on the CPU backend)
        Nd4j.getAffinityManager().ensureLocation(a, AffinityManager.Location.HOST);
        Nd4j.getAffinityManager().ensureLocation(b, AffinityManager.Location.HOST);
        return segmentOf(a).mismatch(segmentOf(b)) == -1;
    }

    /**
     * The off-heap memory behind a contiguous array, as a segment. The array must stay reachable
     * while the segment is used (the segment does not keep it alive).
     */
    static MemorySegment segmentOf(INDArray array) {
        if (!array.isView() && array.ordering() != 'c' && array.ordering() != 'f') {
            throw Invariants.violated("array is not contiguous: expected a c- or f-ordered array or a view; found"
                    + " ordering '" + array.ordering() + "'");
        }
        return ArrayCollectives.segmentOf(array);
    }

    static DType dtypeOf(DataType type) {
        return switch (type) {
            case FLOAT -> DType.FLOAT32;
            case DOUBLE -> DType.FLOAT64;
            case BFLOAT16 -> DType.BFLOAT16;
            default -> throw new IllegalArgumentException("network data type=" + type
                    + " is not supported for gradient sync (expected FLOAT, DOUBLE or BFLOAT16; fix: build the"
                    + " network with .dataType(DataType.FLOAT))");
        };
    }

    /** A {@link MultiLayerNetwork}. */
    record Mln(MultiLayerNetwork net) implements ModelReplica {
        @Override
        public Model model() {
            return net;
        }

        @Override
        public ModelReplica blankCopy() {
            MultiLayerNetwork fresh = new MultiLayerNetwork(net.getLayerWiseConfigurations().clone());
            fresh.init();
            fresh.initGradientsView();
            TensorParallel.copyAttachments(net, fresh); // a tensor-parallel rank's copy talks to the same group
            return new Mln(fresh);
        }

        @Override
        public ModelReplica blankCopyWithBackpropSignals(BackpropProgress progress) {
            MultiLayerConfiguration conf = net.getLayerWiseConfigurations().clone();
            installBackpropSignals(conf, progress);
            MultiLayerNetwork fresh = new MultiLayerNetwork(conf);
            fresh.init();
            fresh.initGradientsView();
            TensorParallel.copyAttachments(net, fresh);
            return new Mln(fresh);
        }

        /**
         * Puts a {@link BackpropSignalPreProcessor} (keyed by the layer's index) in front of the layers
         * of {@code conf} that can take one, and returns those keys. Layer i's input preprocessor runs
         * its backprop right after layer i's backprop. Layer 0 gets none of its own: its input is the
         * caller's array, outside DL4J's workspaces, and a preprocessor's output there fails DL4J's
         * workspace check; its gradient is complete when the gradient hook runs anyway.
         */
        static java.util.Set<String> installBackpropSignals(MultiLayerConfiguration conf, BackpropProgress progress) {
            java.util.Set<String> hooked = new java.util.LinkedHashSet<>();
            for (int i = 0; i < conf.getConfs().size(); i++) {
                if (i > 0 || conf.getInputPreProcess(0) != null) {
                    conf.getInputPreProcessors().put(i, new BackpropSignalPreProcessor(conf.getInputPreProcess(i),
                            Integer.toString(i), progress));
                    hooked.add(Integer.toString(i));
                }
            }
            return hooked;
        }

        @Override
        public List<LayerSlice> layerSlices() {
            List<LayerSlice> out = new ArrayList<>();
            org.deeplearning4j.nn.api.Layer[] layers = net.getLayers();
            for (int i = 0; i < layers.length; i++) {
                INDArray g = layers[i].numParams() > 0 ? layers[i].getGradientsViewArray() : null;
                if (g != null && g.length() > 0) {
                    long start = ModelReplica.elementOffset(gradientView(), g);
                    out.add(new LayerSlice(Integer.toString(i), start, start + g.length()));
                }
            }
            return out;
        }

        @Override
        public void computeGradient(Object batch) {
            if (!(batch instanceof DataSet ds)) {
                throw new IllegalArgumentException("a MultiLayerNetwork trains on DataSets; found "
                        + (batch == null ? "null" : batch.getClass().getName())
                        + " (fix: fit a MultiLayerNetwork with a DataSetIterator, or train a ComputationGraph on MultiDataSets)");
            }
            net.setInput(ds.getFeatures());
            net.setLabels(ds.getLabels());
            net.setLayerMaskArrays(ds.getFeaturesMaskArray(), ds.getLabelsMaskArray());
            net.computeGradientAndScore();
            net.clearLayerMaskArrays();
        }

        @Override
        public void installUpdater(ShardedUpdater sharded) {
            net.setUpdater(new ShardedUpdater.ForMultiLayer(sharded));
        }

        @Override
        public void disableMinibatchDivision() {
            net.conf().setMiniBatch(false); // MultiLayerUpdater.isMiniBatch() reads this one (a clone of layer 0's)
        }

        @Override
        public INDArray params() {
            return net.params();
        }

        @Override
        public INDArray gradientView() {
            return net.getGradientsViewArray();
        }

        @Override
        public void placeGradientView(MemorySegment home) {
            INDArray view = ModelReplica.gradientViewIn(home, net.getGradientsViewArray(), net.getUpdater(false) != null);
            net.setBackpropGradientsViewArray(view);
            ModelReplica.setFlattenedGradients(net, MultiLayerNetwork.class, view);
        }

        @Override
        public INDArray updaterState() {
            Updater u = net.getUpdater(true);
            return u == null ? null : u.getStateViewArray();
        }

        @Override
        public int iterationCount() {
            return net.getIterationCount();
        }

        @Override
        public void setIterationCount(int count) {
            net.setIterationCount(count);
        }

        @Override
        public int epochCount() {
            return net.getEpochCount();
        }

        @Override
        public void setEpochCount(int count) {
            net.setEpochCount(count);
        }

        @Override
        public void fit(DataSet batch) {
            net.fit(batch);
        }

        @Override
        public void fit(MultiDataSet batch) {
            throw new IllegalArgumentException("a MultiLayerNetwork trains on DataSets; found a MultiDataSet"
                    + " (fix: use fit(DataSetIterator), or a ComputationGraph for multiple inputs/outputs)");
        }

        @Override
        public void addListener(TrainingListener listener) {
            net.addListeners(listener);
        }

        @Override
        public double score() {
            return net.score();
        }

        @Override
        public void setScore(double score) {
            net.setScore(score);
        }

        @Override
        public double regularizationScore() {
            return net.calcRegularizationScore(true);
        }

        @Override
        public List<TrainingListener> listeners() {
            return net.getListeners() == null ? List.of() : List.copyOf(net.getListeners());
        }

        @Override
        public boolean truncatedBptt() {
            return net.getLayerWiseConfigurations().getBackpropType() == org.deeplearning4j.nn.conf.BackpropType.TruncatedBPTT;
        }

        @Override
        public WorkspaceMode trainingWorkspaceMode() {
            return net.getLayerWiseConfigurations().getTrainingWorkspaceMode();
        }

        @Override
        public void setTrainingWorkspaceMode(WorkspaceMode mode) {
            net.getLayerWiseConfigurations().setTrainingWorkspaceMode(mode);
        }

        @Override
        public void setInputAndLabels(Object batch) {
            if (batch == null) {
                net.setInput(null);
                net.setLabels(null);
                return;
            }
            DataSet ds = (DataSet) batch;
            net.setInput(ds.getFeatures());
            net.setLabels(ds.getLabels());
        }
    }

    /** A {@link ComputationGraph}. */
    record Graph(ComputationGraph net) implements ModelReplica {
        @Override
        public Model model() {
            return net;
        }

        @Override
        public ModelReplica blankCopy() {
            ComputationGraph fresh = new ComputationGraph(net.getConfiguration().clone());
            fresh.init();
            fresh.initGradientsView();
            TensorParallel.copyAttachments(net, fresh); // a tensor-parallel rank's copy talks to the same group
            return new Graph(fresh);
        }

        @Override
        public ModelReplica blankCopyWithBackpropSignals(BackpropProgress progress) {
            ComputationGraphConfiguration conf = net.getConfiguration().clone();
            installBackpropSignals(conf, progress);
            ComputationGraph fresh = new ComputationGraph(conf);
            fresh.init();
            fresh.initGradientsView();
            TensorParallel.copyAttachments(net, fresh);
            return new Graph(fresh);
        }

        /**
         * Puts a {@link BackpropSignalPreProcessor} (keyed by the vertex name) in front of the layer
         * vertices of {@code conf} that can take one, and returns those names. As for a
         * MultiLayerNetwork's layer 0: a vertex fed by a network input keeps what it had.
         */
        static java.util.Set<String> installBackpropSignals(ComputationGraphConfiguration conf, BackpropProgress progress) {
            java.util.Set<String> hooked = new java.util.LinkedHashSet<>();
            for (Map.Entry<String, org.deeplearning4j.nn.conf.graph.GraphVertex> e : conf.getVertices().entrySet()) {
                if (!(e.getValue() instanceof org.deeplearning4j.nn.conf.graph.LayerVertex lv)) {
                    continue;
                }
                boolean fedByNetworkInput = conf.getVertexInputs().getOrDefault(e.getKey(), List.of()).stream()
                        .anyMatch(conf.getNetworkInputs()::contains);
                if (lv.getPreProcessor() != null || !fedByNetworkInput) {
                    lv.setPreProcessor(new BackpropSignalPreProcessor(lv.getPreProcessor(), e.getKey(), progress));
                    hooked.add(e.getKey());
                }
            }
            return hooked;
        }

        @Override
        public List<LayerSlice> layerSlices() {
            List<LayerSlice> out = new ArrayList<>();
            for (GraphVertex v : net.getVertices()) {
                INDArray g = v.hasLayer() && v.getLayer().numParams() > 0 ? v.getGradientsViewArray() : null;
                if (g != null && g.length() > 0) {
                    long start = ModelReplica.elementOffset(gradientView(), g);
                    out.add(new LayerSlice(v.getVertexName(), start, start + g.length()));
                }
            }
            return out;
        }

        @Override
        public void computeGradient(Object batch) {
            switch (batch) {
                case DataSet ds -> {
                    net.setInputs(ds.getFeatures());
                    net.setLabels(ds.getLabels());
                    net.setLayerMaskArrays(ds.getFeaturesMaskArray() == null ? null : new INDArray[] {ds.getFeaturesMaskArray()},
                            ds.getLabelsMaskArray() == null ? null : new INDArray[] {ds.getLabelsMaskArray()});
                }
                case MultiDataSet mds -> {
                    net.setInputs(mds.getFeatures());
                    net.setLabels(mds.getLabels());
                    net.setLayerMaskArrays(mds.getFeaturesMaskArrays(), mds.getLabelsMaskArrays());
                }
                default -> throw new IllegalArgumentException("a ComputationGraph trains on DataSets or MultiDataSets; found "
                        + (batch == null ? "null" : batch.getClass().getName())
                        + " (fix: fit with a DataSetIterator or a MultiDataSetIterator)");
            }
            net.computeGradientAndScore();
            net.clearLayerMaskArrays();
        }

        @Override
        public void installUpdater(ShardedUpdater sharded) {
            net.setUpdater(new ShardedUpdater.ForGraph(net, sharded));
        }

        @Override
        public void disableMinibatchDivision() {
            net.conf().setMiniBatch(false); // ComputationGraphUpdater.isMiniBatch() reads this one (the default configuration)
        }

        @Override
        public INDArray params() {
            return net.params();
        }

        @Override
        public INDArray gradientView() {
            return net.getGradientsViewArray();
        }

        @Override
        public void placeGradientView(MemorySegment home) {
            INDArray view = ModelReplica.gradientViewIn(home, net.getGradientsViewArray(), net.getUpdater(false) != null);
            net.setBackpropGradientsViewArray(view);
            ModelReplica.setFlattenedGradients(net, ComputationGraph.class, view);
        }

        @Override
        public INDArray updaterState() {
            var u = net.getUpdater(true);
            return u == null ? null : u.getStateViewArray();
        }

        @Override
        public int iterationCount() {
            return net.getIterationCount();
        }

        @Override
        public void setIterationCount(int count) {
            net.getConfiguration().setIterationCount(count);
        }

        @Override
        public int epochCount() {
            return net.getEpochCount();
        }

        @Override
        public void setEpochCount(int count) {
            net.getConfiguration().setEpochCount(count);
        }

        @Override
        public void fit(DataSet batch) {
            net.fit(batch);
        }

        @Override
        public void fit(MultiDataSet batch) {
            net.fit(batch);
        }

        @Override
        public void addListener(TrainingListener listener) {
            net.addListeners(listener);
        }

        @Override
        public double score() {
            return net.score();
        }

        @Override
        public void setScore(double score) {
            net.setScore(score);
        }

        @Override
        public double regularizationScore() {
            return net.calcRegularizationScore(true);
        }

        @Override
        public List<TrainingListener> listeners() {
            return net.getListeners() == null ? List.of() : List.copyOf(net.getListeners());
        }

        @Override
        public boolean truncatedBptt() {
            return net.getConfiguration().getBackpropType() == org.deeplearning4j.nn.conf.BackpropType.TruncatedBPTT;
        }

        @Override
        public WorkspaceMode trainingWorkspaceMode() {
            return net.getConfiguration().getTrainingWorkspaceMode();
        }

        @Override
        public void setTrainingWorkspaceMode(WorkspaceMode mode) {
            net.getConfiguration().setTrainingWorkspaceMode(mode);
        }

        @Override
        public void setInputAndLabels(Object batch) {
            if (batch == null) {
                net.setInputs((INDArray[]) null);
                net.setLabels((INDArray[]) null);
                return;
            }
            if (batch instanceof DataSet ds) {
                net.setInputs(ds.getFeatures());
                net.setLabels(ds.getLabels());
            } else {
                MultiDataSet mds = (MultiDataSet) batch;
                net.setInputs(mds.getFeatures());
                net.setLabels(mds.getLabels());
            }
        }
    }
}