package org.symmem4j.dl4j;

import java.lang.foreign.MemorySegment;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.nn.api.Trainable;
import org.deeplearning4j.nn.api.Updater;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.updater.BaseMultiLayerUpdater;
import org.deeplearning4j.optimize.api.TrainingListener;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.symmem4j.parallel.DType;

/**
 * The operations the wrapper needs from a DL4J network, for {@link MultiLayerNetwork} and
 * {@link ComputationGraph} alike: flat parameter, gradient and updater-state views, counters,
 * cloning and one training step.
 */
sealed interface ModelReplica permits ModelReplica.Mln, ModelReplica.Graph {

    static ModelReplica of(Model model) {
        if (model instanceof MultiLayerNetwork m) {
            return new Mln(m);
        }
        if (model instanceof ComputationGraph g) {
            return new Graph(g);
        }
        throw new IllegalArgumentException("expected a MultiLayerNetwork or ComputationGraph; found "
                + (model == null ? "null" : model.getClass().getName()));
    }

    Model model();

    /** Initializes parameters and the flat gradient view if the network has not been initialized yet. */
    static void ensureInitialized(ModelReplica replica) {
        switch (replica) {
            case Mln m -> {
                m.net().init();
                m.net().initGradientsView();
            }
            case Graph g -> {
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
        ModelReplica copy = blankCopy();
        copy.copyStateFrom(this);
        copy.disableMinibatchDivision();
        return copy;
    }

    /**
     * A replica for sharded training: like {@link #newReplica()} (parameters, counters, minibatch
     * division off) but DL4J's own updater is never created, so no full-size updater state is
     * allocated; {@link #installUpdater} gives it a {@link ShardedUpdater}.
     */
    default ModelReplica newShardedReplica() {
        ModelReplica copy = blankCopy();
        copy.copyParamsAndCountersFrom(this);
        copy.disableMinibatchDivision();
        return copy;
    }

    /**
     * A network of the same kind built afresh from a copy of this one's configuration, initialized,
     * with its flat gradient view; nothing copied from this one yet.
     */
    ModelReplica blankCopy();

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
                + " model; found " + (u == null ? "null" : u.getClass().getName()));
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
                throw new IllegalStateException("two layers are named " + t.getConfig().getLayerName());
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

    /**
     * Sets the network's input and labels to {@code batch} (a DataSet or MultiDataSet), as DL4J's
     * fit does before an iteration; null clears them, as DL4J does after fit.
     */
    void setInputAndLabels(Object batch);

    /**
     * Makes {@code gradient()} return DL4J's view of the flat gradient view: one array per layer and
     * parameter, keyed as DL4J keys them, as a network has after computing a gradient. DL4J has no
     * setter for it (its fit sets the field while computing), so it is set by reflection.
     */
    default void exposeGradientView() {
        Map<String, INDArray> views = new LinkedHashMap<>();
        List<org.deeplearning4j.nn.api.Layer> layers = List.of(switch (this) {
            case Mln m -> m.net().getLayers();
            case Graph g -> g.net().getLayers();
        });
        for (int i = 0; i < layers.size(); i++) {
            org.deeplearning4j.nn.api.Layer l = layers.get(i);
            if (l.numParams() == 0) {
                continue;
            }
            String prefix = this instanceof Mln ? String.valueOf(i) : l.conf().getLayer().getLayerName();
            Map<String, INDArray> perParam = l.conf().getLayer().initializer()
                    .getGradientsFromFlattened(l.conf(), l.getGradientsViewArray());
            perParam.forEach((param, view) -> views.put(prefix + "_" + param, view));
        }
        org.deeplearning4j.nn.gradient.DefaultGradient gradient = new org.deeplearning4j.nn.gradient.DefaultGradient(gradientView());
        views.forEach(gradient::setGradientFor);
        Class<?> type = this instanceof Mln ? MultiLayerNetwork.class : ComputationGraph.class;
        try {
            java.lang.reflect.Field field = type.getDeclaredField("gradient");
            field.setAccessible(true);
            field.set(model(), gradient);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new IllegalStateException("cannot set " + type.getSimpleName() + ".gradient (expected DL4J 1.0.0-M2.1's"
                    + " protected field; found " + e + "): listeners that read model.gradient() need it", e);
        }
    }

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
        return a.length() == b.length() && a.dataType() == b.dataType()
                && segmentOf(a).mismatch(segmentOf(b)) == -1;
    }

    /**
     * The off-heap memory behind a contiguous array, as a segment. The array must stay reachable
     * while the segment is used (the segment does not keep it alive).
     */
    static MemorySegment segmentOf(INDArray array) {
        if (!array.isView() && array.ordering() != 'c' && array.ordering() != 'f') {
            throw new IllegalArgumentException("array is not contiguous");
        }
        long elementBytes = array.dataType().width();
        long address = array.data().address() + array.offset() * elementBytes;
        return MemorySegment.ofAddress(address).reinterpret(array.length() * elementBytes);
    }

    static DType dtypeOf(DataType type) {
        return switch (type) {
            case FLOAT -> DType.FLOAT32;
            case DOUBLE -> DType.FLOAT64;
            case BFLOAT16 -> DType.BFLOAT16;
            default -> throw new IllegalArgumentException("network data type=" + type
                    + " is not supported for gradient sync (expected FLOAT, DOUBLE or BFLOAT16)");
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
            return new Mln(fresh);
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
                    + " (use fit(DataSetIterator), or a ComputationGraph for multiple inputs/outputs)");
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
            return new Graph(fresh);
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