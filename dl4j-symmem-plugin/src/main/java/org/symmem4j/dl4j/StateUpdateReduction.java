package org.symmem4j.dl4j;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Trainable;
import org.deeplearning4j.nn.api.TrainingConfig;
import org.deeplearning4j.nn.conf.layers.BatchNormalization;
import org.deeplearning4j.nn.conf.layers.CenterLossOutputLayer;
import org.deeplearning4j.nn.params.BatchNormalizationParamInitializer;
import org.deeplearning4j.nn.params.CenterLossParamInitializer;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.api.DataSet;
import org.nd4j.linalg.dataset.api.MultiDataSet;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.numeric.BFloat16;

/**
 * The entries of DL4J's flat gradient view that hold updates of a layer's <em>state</em> rather
 * than gradients, and their reduction across workers to exactly what one model computes on the
 * merged batch (every worker's examples of the step).
 *
 * <p><b>Which entries.</b> DL4J marks them itself: {@code Trainable.updaterDivideByMinibatch(param)}
 * is false for an array whose gradient-view entries the updater must not divide by the batch size
 * because they are an update DL4J computed, applied as {@code params -= update} through a NoOp
 * updater. In DL4J 1.0.0-M2.1 that is BatchNormalization's running mean and running variance (or
 * log10 of the running standard deviation, {@code useLogStd}); wrapper layers and graph vertices
 * pass the flag through. One more shipped layer computes a state update itself without the flag:
 * CenterLossOutputLayer's class centers (NoOp updater, but divided by the batch size like a
 * gradient), recognized by its configuration class.
 *
 * <p><b>Why a reduction of their own.</b> The wrapper sums the gradient view over workers and
 * divides by the step's examples N: one model's gradient on the merged batch, because a gradient
 * is a sum over examples. These updates are not sums over examples. With n_w examples on worker w,
 * d the decay, μ_t, σ²_t the running statistics, m_w, v_w the worker's batch mean and (biased, as
 * DL4J computes it) variance, m and v the merged batch's:
 * <ul>
 *   <li>mean: DL4J writes u_w = (1−d)(μ_t − m_w); the merged update is the example-weighted
 *       average ū = Σ n_w u_w / N (summing and dividing by N, as before, moved the running mean
 *       (workers/N)× as far);</li>
 *   <li>variance: DL4J writes (1−d)(σ²_t − v_w); the merged batch's variance is the workers'
 *       averaged plus the spread of their means, v = Σ n_w (v_w + (m_w − m)²) / N, and the means
 *       come from the mean updates, m_w − m = (ū − u_w)/(1−d): the merged update is
 *       Σ n_w (1−d)(σ²_t − v_w) / N − Σ n_w (ū − u_w)² / ((1−d) N);</li>
 *   <li>log10(std): DL4J writes ½·log10(σ²_t / (d σ²_t + (1−d) v_w)); r_w = 10^(−2 u) =
 *       d + (1−d) v_w/σ²_t is linear in v_w, so r − 1 = Σ n_w (r_w − 1)/N +
 *       Σ n_w (ū − u_w)² / ((1−d) N σ²_t), and the update is −log10(r)/2 (expm1/log1p keep the
 *       precision of small updates);</li>
 *   <li>centers: DL4J writes α Σ_{i of class j} (c_j − x_i) / (1 + n_j) for center j, then
 *       divides by the batch size: the numerators and the class counts n_j (from the layer's
 *       labels) add over workers, then divide (with DL4J's {@code gradientCheck} flag there is no
 *       per-class denominator and the plain sum is exact).</li>
 * </ul>
 * Any other array that DL4J marks as not divided (a user's own layer) gets the example-weighted
 * average, exact for updates that are means over the batch; the wrapper logs those at start-up.
 * An idle worker (a short last round) contributes nothing. These formulas work in the update's own
 * scale, so frozen statistics (all updates zero) merge to exactly zero.
 *
 * <p><b>How.</b> In the gradient hook, before the gradient view is reduced, each worker turns its
 * entries into additive contributions (weighted by its examples) in a small FLOAT64 buffer, which
 * is all-reduced with ONE_SHOT (ranks added in order: the same bits on every rank); the variance
 * needs the merged mean first, so a second small all-reduce follows when a BatchNorm keeps one.
 * After the gradient view's reduction and division, {@link #write} puts the merged values over the
 * entries: what one model's gradient view holds at that point. All arithmetic is in double with
 * {@link StrictMath}, so every rank writes the same bits and replicas stay bitwise identical; ZeRO
 * stage 2 writes only its own shard. Stage 3 holds a layer's elements only while the layer is in
 * use, so its rules read copies taken before each layer's reduce-scatter ({@link #capture}), and it
 * writes the merged values over its own blocks.
 *
 * <p>Not thread-safe: one per worker, used by its thread.
 */
final class StateUpdateReduction {

    private static final double TWO_LN10 = 2 * StrictMath.log(10.0);

    /** How an array of state updates merges across workers. */
    enum Merge {
        BATCH_NORM_MEAN, BATCH_NORM_VARIANCE, BATCH_NORM_LOG10_STD, CENTER_LOSS_CENTERS, EXAMPLE_WEIGHTED_AVERAGE
    }

    /** One parameter array whose gradient-view entries [start, end) are a state update, and how it merges. */
    record Entry(String layer, String param, long start, long end, Merge merge) {
        long length() {
            return end - start;
        }

        @Override
        public String toString() {
            return layer + "/" + param + "[" + start + "," + end + ")=" + merge;
        }
    }

    /**
     * The state entries of a network: {@code variables} are its parameter arrays as DL4J's updater
     * lists them ({@link UpdaterLayout#variablesOf}), {@code trainables} its layers (graph: vertices)
     * by the updater's names, whose {@code updaterDivideByMinibatch} and configuration decide.
     */
    static List<Entry> find(List<UpdaterLayout.Variable> variables, Map<String, Trainable> trainables) {
        List<Entry> out = new ArrayList<>();
        for (UpdaterLayout.Variable v : variables) {
            Trainable t = trainable(trainables, v.layer());
            TrainingConfig config = t.getConfig();
            Merge merge = null;
            if (!t.updaterDivideByMinibatch(v.param())) {
                merge = config instanceof BatchNormalization ? switch (v.param()) {
                    case BatchNormalizationParamInitializer.GLOBAL_MEAN -> Merge.BATCH_NORM_MEAN;
                    case BatchNormalizationParamInitializer.GLOBAL_VAR -> Merge.BATCH_NORM_VARIANCE;
                    case BatchNormalizationParamInitializer.GLOBAL_LOG_STD -> Merge.BATCH_NORM_LOG10_STD;
                    default -> Merge.EXAMPLE_WEIGHTED_AVERAGE;
                } : Merge.EXAMPLE_WEIGHTED_AVERAGE;
            } else if (config instanceof CenterLossOutputLayer && CenterLossParamInitializer.CENTER_KEY.equals(v.param())) {
                merge = Merge.CENTER_LOSS_CENTERS;
            }
            if (merge != null && v.end() > v.start()) {
                out.add(new Entry(v.layer(), v.param(), v.start(), v.end(), merge));
            }
        }
        return List.copyOf(out);
    }

    private static Trainable trainable(Map<String, Trainable> trainables, String layer) {
        Trainable t = trainables.get(layer);
        if (t == null) {
            throw Invariants.violated("layer " + layer + " of DL4J's updater is not in the network (layers: "
                    + trainables.keySet() + ")");
        }
        return t;
    }

    private final Communicator comm;
    private final List<Entry> entries;
    private final FlatArray gradient;
    private final FlatArray liveParams;
    /** Stage 3: the copies the rules read, taken by {@link #capture}; null when the rules read the live views. */
    private final Captured capturedGradient;
    private final Captured capturedParams;
    private final List<Rule> rules;
    private final int firstSlots;
    private final int secondSlots;
    /**
     * ONE_SHOT where it runs (ranks added in rank order: every rank gets the same sums, bit for bit); across machines
     * the group's engine (MPI's order, still the same on every rank). Chosen once: the sizes never change.
     */
    private final Algorithm firstAlgorithm;
    private final Algorithm secondAlgorithm;
    /** Additive contributions, all-reduced: first everything, then what needs the first sums (BatchNorm variance). */
    private final MemorySegment first;
    private final MemorySegment second;

    /**
     * @param entries {@link #find}'s result for the network {@code replica} is a copy of
     * @param comm    the worker's communicator: {@link #reduce} is collective over it
     */
    StateUpdateReduction(List<Entry> entries, ModelReplica replica, Communicator comm) {
        this(entries, replica, comm, false);
    }

    /**
     * @param captured whether the rules read copies taken by {@link #capture} (stage 3, whose views
     *                 hold a layer's elements only while the layer is in use) instead of the live views
     */
    StateUpdateReduction(List<Entry> entries, ModelReplica replica, Communicator comm, boolean captured) {
        this.comm = comm;
        this.entries = List.copyOf(entries);
        this.gradient = new FlatArray(replica.gradientView());
        this.liveParams = new FlatArray(replica.params());
        this.capturedGradient = captured ? new Captured(entries) : null;
        this.capturedParams = captured ? new Captured(entries) : null;
        Values gradient = captured ? capturedGradient : this.gradient;
        Values params = captured ? capturedParams : liveParams;
        Map<String, Trainable> trainables = replica.trainables();
        Map<String, Entry[]> batchNorms = new LinkedHashMap<>();
        List<Rule> built = new ArrayList<>();
        for (Entry e : entries) {
            switch (e.merge()) {
                case EXAMPLE_WEIGHTED_AVERAGE -> built.add(new WeightedAverage(e, gradient));
                case CENTER_LOSS_CENTERS -> built.add(new Centers(e, gradient, trainable(trainables, e.layer()),
                        outputIndex(replica, e.layer())));
                case BATCH_NORM_MEAN -> batchNorms.computeIfAbsent(e.layer(), k -> new Entry[2])[0] = e;
                case BATCH_NORM_VARIANCE, BATCH_NORM_LOG10_STD -> batchNorms.computeIfAbsent(e.layer(), k -> new Entry[2])[1] = e;
            }
        }
        for (Map.Entry<String, Entry[]> bn : batchNorms.entrySet()) {
            Entry mean = bn.getValue()[0];
            Entry spread = bn.getValue()[1];
            if (mean == null || (spread != null && spread.length() != mean.length())) {
                throw Invariants.violated("BatchNormalization layer " + bn.getKey() + ": expected running mean and"
                        + " variance (or log10 std) of the same length; found mean=" + mean + " spread=" + spread);
            }
            BatchNormalization conf = (BatchNormalization) trainable(trainables, bn.getKey()).getConfig();
            built.add(new BatchNormStatistics(mean, spread, conf.getDecay(), gradient, params));
        }
        int a = 0;
        int b = 0;
        for (Rule r : built) {
            r.firstAt = a;
            r.secondAt = b;
            a += r.firstSlots();
            b += r.secondSlots();
        }
        this.rules = List.copyOf(built);
        this.firstSlots = a;
        this.secondSlots = b;
        this.firstAlgorithm = AlgorithmPolicy.oneShotWhereItRuns(comm, a, DType.FLOAT64, ReduceOp.SUM);
        this.secondAlgorithm = b > 0 ? AlgorithmPolicy.oneShotWhereItRuns(comm, b, DType.FLOAT64, ReduceOp.SUM) : null;
        Arena arena = Arena.ofAuto();
        this.first = arena.allocate(8L * Math.max(1, a), 64);
        this.second = arena.allocate(8L * Math.max(1, b), 64);
    }

    /** Which of the network's label arrays belongs to output layer {@code layer}. */
    private static int outputIndex(ModelReplica replica, String layer) {
        if (replica instanceof ModelReplica.Graph g) {
            int index = g.net().getConfiguration().getNetworkOutputs().indexOf(layer);
            if (index < 0) {
                throw Invariants.violated("layer " + layer + " holds labels but is not among the graph's outputs "
                        + g.net().getConfiguration().getNetworkOutputs());
            }
            return index;
        }
        return 0; // a MultiLayerNetwork has one output layer
    }

    /**
     * Collective, in the gradient hook before the gradient view is reduced (its entries must still
     * hold this worker's own updates): merges every entry over the workers and keeps the result
     * for {@link #write}.
     *
     * @param examples     this worker's examples in the step (0 for an idle worker)
     * @param stepExamples the step's examples over all workers
     * @param batch        this worker's batch (a DataSet or MultiDataSet): its labels, for rules that count classes
     */
    void reduce(long examples, long stepExamples, Object batch) {
        for (Rule r : rules) {
            r.contributeFirst(examples, batch, first);
        }
        comm.allReduce(first, firstSlots, DType.FLOAT64, ReduceOp.SUM, firstAlgorithm);
        if (secondSlots > 0) {
            for (Rule r : rules) {
                r.contributeSecond(examples, stepExamples, first, second);
            }
            comm.allReduce(second, secondSlots, DType.FLOAT64, ReduceOp.SUM, secondAlgorithm);
        }
        for (Rule r : rules) {
            r.merge(stepExamples, first, second);
        }
    }

    /**
     * Stage 3, on the worker's thread after a layer's backprop and before its gradient is
     * reduce-scattered (its parameters still gathered): copies this worker's updates, and the
     * parameters the rules read, of the entries' elements in [from, to).
     */
    void capture(long from, long to) {
        if (capturedGradient == null) {
            throw Invariants.violated("capture on a reduction that reads the live views");
        }
        if (overlaps(from, to)) {
            capturedGradient.copy(gradient, from, to);
            capturedParams.copy(liveParams, from, to);
        }
    }

    /** Whether any entry has elements in [from, to) of the gradient view. */
    boolean overlaps(long from, long to) {
        for (Entry e : entries) {
            if (e.start() < to && from < e.end()) {
                return true;
            }
        }
        return false;
    }

    /**
     * Writes the merged values of the last {@link #reduce} over the entries' elements in [from, to)
     * of the gradient view: what one model's updater receives (divided by the step's examples
     * where DL4J divides, as the centers).
     */
    void write(long from, long to) {
        for (Rule r : rules) {
            r.write(gradient, from, to, true);
        }
    }

    /**
     * Writes the merged values over the entries' elements in [from, to) of {@code target}, a copy
     * of gradient-view elements from {@code targetStart} on, as one model's gradient view holds
     * them before its updater divides by the batch size: what DL4J's onGradientCalculation
     * listeners see.
     */
    void writeUndivided(INDArray target, long targetStart, long from, long to) {
        FlatArray t = new FlatArray(target, targetStart);
        for (Rule r : rules) {
            r.write(t, from, to, false);
        }
    }

    // ------------------------------------------------------------------ the merge rules

    private abstract static class Rule {
        int firstAt;
        int secondAt;

        abstract int firstSlots();

        int secondSlots() {
            return 0;
        }

        /** Reads this worker's updates (still in the gradient view) and writes its additive contributions. */
        abstract void contributeFirst(long examples, Object batch, MemorySegment first);

        /** After the first all-reduce: contributions that need its sums. */
        void contributeSecond(long examples, long stepExamples, MemorySegment first, MemorySegment second) {
        }

        /** After the all-reduces: the merged values, as one model's gradient view holds them. */
        abstract void merge(long stepExamples, MemorySegment first, MemorySegment second);

        /** Writes the merged values over the entries' elements in [from, to) of {@code target}. */
        abstract void write(FlatArray target, long from, long to, boolean dividedByExamples);
    }

    /** Σ n_w u_w / N: exact for an update that is a mean over the batch's examples. */
    private static final class WeightedAverage extends Rule {
        private final Entry entry;
        private final Values gradient;
        private final double[] merged;

        WeightedAverage(Entry entry, Values gradient) {
            this.entry = entry;
            this.gradient = gradient;
            this.merged = new double[Math.toIntExact(entry.length())];
        }

        @Override
        int firstSlots() {
            return merged.length;
        }

        @Override
        void contributeFirst(long examples, Object batch, MemorySegment first) {
            for (int i = 0; i < merged.length; i++) {
                // an idle worker's entries are zero; never multiply what it holds (0 × NaN is NaN)
                slot(first, firstAt + i, examples == 0 ? 0 : examples * gradient.get(entry.start() + i));
            }
        }

        @Override
        void merge(long stepExamples, MemorySegment first, MemorySegment second) {
            for (int i = 0; i < merged.length; i++) {
                merged[i] = slot(first, firstAt + i) / stepExamples;
            }
        }

        @Override
        void write(FlatArray target, long from, long to, boolean dividedByExamples) {
            target.write(entry, merged, from, to); // DL4J never divides these
        }
    }

    /** One BatchNormalization layer: running mean and, if it keeps one, running variance or log10(std). */
    private static final class BatchNormStatistics extends Rule {
        private final Entry mean;
        private final Entry spread;
        private final double oneMinusDecay;
        private final Values gradient;
        private final Values params;
        private final int channels;
        /** This worker's mean updates u_w, kept for the second contribution. */
        private final double[] localMean;
        private final double[] mergedMean;
        private final double[] mergedSpread;

        BatchNormStatistics(Entry mean, Entry spread, double decay, Values gradient, Values params) {
            this.mean = mean;
            this.spread = spread;
            this.oneMinusDecay = 1 - decay; // as DL4J computes it: (1 - decay) in double
            this.gradient = gradient;
            this.params = params;
            this.channels = Math.toIntExact(mean.length());
            this.localMean = new double[channels];
            this.mergedMean = new double[channels];
            this.mergedSpread = spread == null ? null : new double[channels];
        }

        private boolean logStd() {
            return spread.merge() == Merge.BATCH_NORM_LOG10_STD;
        }

        @Override
        int firstSlots() {
            return spread == null ? channels : 2 * channels;
        }

        @Override
        int secondSlots() {
            return spread == null ? 0 : channels;
        }

        @Override
        void contributeFirst(long examples, Object batch, MemorySegment first) {
            for (int c = 0; c < channels; c++) {
                localMean[c] = examples == 0 ? 0 : gradient.get(mean.start() + c);
                slot(first, firstAt + c, examples * localMean[c]);
                if (spread != null) {
                    double u = examples == 0 ? 0 : gradient.get(spread.start() + c);
                    // variance: the update itself; log10(std): r_w − 1 = 10^(−2u) − 1, linear in the batch variance
                    double q = logStd() ? StrictMath.expm1(-TWO_LN10 * u) : u;
                    slot(first, firstAt + channels + c, examples * q);
                }
            }
        }

        @Override
        void contributeSecond(long examples, long stepExamples, MemorySegment first, MemorySegment second) {
            for (int c = 0; c < channels; c++) {
                double d = slot(first, firstAt + c) / stepExamples - localMean[c];
                slot(second, secondAt + c, examples == 0 ? 0 : examples * d * d);
            }
        }

        @Override
        void merge(long stepExamples, MemorySegment first, MemorySegment second) {
            for (int c = 0; c < channels; c++) {
                mergedMean[c] = slot(first, firstAt + c) / stepExamples;
                if (spread == null) {
                    continue;
                }
                double averaged = slot(first, firstAt + channels + c) / stepExamples;
                // Σ n_w (ū − u_w)² / ((1−d) N) = (1−d) Σ n_w (m_w − m)² / N; with decay 1 nothing moves
                double between = oneMinusDecay == 0 ? 0 : slot(second, secondAt + c) / (oneMinusDecay * stepExamples);
                if (logStd()) {
                    double runningVariance = StrictMath.exp(TWO_LN10 * params.get(spread.start() + c));
                    mergedSpread[c] = -StrictMath.log1p(averaged + between / runningVariance) / TWO_LN10;
                } else {
                    mergedSpread[c] = averaged - between;
                }
            }
        }

        @Override
        void write(FlatArray target, long from, long to, boolean dividedByExamples) {
            target.write(mean, mergedMean, from, to); // DL4J never divides these
            if (spread != null) {
                target.write(spread, mergedSpread, from, to);
            }
        }
    }

    /**
     * CenterLossOutputLayer's centers, [classes × features] row-major in the view (DL4J's 'c'
     * order): center j's update is α Σ_{i of class j} (c_j − x_i) / (1 + n_j), then divided by
     * the batch size.
     */
    private static final class Centers extends Rule {
        private final Entry entry;
        private final Values gradient;
        private final int outputIndex;
        private final boolean perClassDenominator;
        private final int classes;
        private final int features;
        private final double[] undivided;
        private final double[] merged;

        Centers(Entry entry, Values gradient, Trainable trainable, int outputIndex) {
            this.entry = entry;
            this.gradient = gradient;
            this.outputIndex = outputIndex;
            CenterLossOutputLayer conf = (CenterLossOutputLayer) trainable.getConfig();
            this.perClassDenominator = !conf.getGradientCheck(); // gradientCheck: DL4J skips the division
            this.classes = Math.toIntExact(conf.getNOut());
            this.features = Math.toIntExact(conf.getNIn());
            if ((long) classes * features != entry.length()) {
                throw Invariants.violated("center-loss layer " + entry.layer() + ": expected nOut x nIn = " + classes
                        + " x " + features + " centers; found " + entry.length() + " elements");
            }
            this.undivided = new double[classes * features];
            this.merged = new double[classes * features];
        }

        @Override
        int firstSlots() {
            return classes * features + classes;
        }

        @Override
        void contributeFirst(long examples, Object batch, MemorySegment first) {
            double[] counts = new double[classes];
            if (examples > 0 && perClassDenominator) {
                // the labels DL4J counted (a graph clears its layers' labels before the gradient hook)
                INDArray labels = batch instanceof DataSet ds ? ds.getLabels() : ((MultiDataSet) batch).getLabels(outputIndex);
                if (labels == null || labels.rank() != 2 || labels.size(1) != classes) {
                    throw new IllegalStateException("center-loss layer " + entry.layer() + ": expected labels [batch, "
                            + classes + "]; found " + (labels == null ? "none" : java.util.Arrays.toString(labels.shape()))
                            + " (fix: give the center-loss output layer one-hot labels of shape [batch, " + classes + "])");
                }
                counts = labels.castTo(DataType.DOUBLE).sum(0).toDoubleVector();
            }
            for (int j = 0; j < classes; j++) {
                for (int f = 0; f < features; f++) {
                    int i = j * features + f;
                    // the numerator α Σ (c_j − x_i): the worker's update times its own denominator
                    slot(first, firstAt + i, examples == 0 ? 0 : gradient.get(entry.start() + i) * (perClassDenominator
                            ? 1 + counts[j] : 1));
                }
                slot(first, firstAt + classes * features + j, counts[j]);
            }
        }

        @Override
        void merge(long stepExamples, MemorySegment first, MemorySegment second) {
            for (int j = 0; j < classes; j++) {
                double denominator = perClassDenominator ? 1 + slot(first, firstAt + classes * features + j) : 1;
                for (int f = 0; f < features; f++) {
                    int i = j * features + f;
                    undivided[i] = slot(first, firstAt + i) / denominator;
                    // DL4J divides the centers' update by the batch size like a gradient
                    merged[i] = undivided[i] / stepExamples;
                }
            }
        }

        @Override
        void write(FlatArray target, long from, long to, boolean dividedByExamples) {
            target.write(entry, dividedByExamples ? merged : undivided, from, to);
        }
    }

    private static void slot(MemorySegment buffer, long index, double value) {
        buffer.setAtIndex(ValueLayout.JAVA_DOUBLE, index, value);
    }

    private static double slot(MemorySegment buffer, long index) {
        return buffer.getAtIndex(ValueLayout.JAVA_DOUBLE, index);
    }

    /** A flat DL4J array (parameters or gradient view) read and written element by element as double. */
    /** Element values by gradient-view index, as the merge rules read them. */
    private interface Values {
        double get(long e);
    }

    /**
     * A copy of the entries' elements, taken while they are still this worker's (stage 3 gives a
     * layer's pages back once its gradient is reduce-scattered): what the rules read instead of the
     * live view.
     */
    private static final class Captured implements Values {
        private final long[] starts;
        private final double[][] values;

        Captured(List<Entry> entries) {
            List<Entry> sorted = entries.stream().sorted(java.util.Comparator.comparingLong(Entry::start)).toList();
            this.starts = sorted.stream().mapToLong(Entry::start).toArray();
            this.values = new double[sorted.size()][];
            for (int i = 0; i < sorted.size(); i++) {
                values[i] = new double[Math.toIntExact(sorted.get(i).length())];
            }
        }

        /** Copies the entries' elements in [from, to) of {@code live}. */
        void copy(Values live, long from, long to) {
            for (int i = 0; i < starts.length; i++) {
                long a = Math.max(from, starts[i]);
                long b = Math.min(to, starts[i] + values[i].length);
                for (long e = a; e < b; e++) {
                    values[i][(int) (e - starts[i])] = live.get(e);
                }
            }
        }

        @Override
        public double get(long e) {
            int i = java.util.Arrays.binarySearch(starts, e);
            i = i >= 0 ? i : -i - 2;
            if (i < 0 || e - starts[i] >= values[i].length) {
                throw Invariants.violated("element " + e + " is in no state entry");
            }
            return values[i][(int) (e - starts[i])];
        }
    }

    private static final class FlatArray implements Values {
        @SuppressWarnings("unused") // keeps the memory behind the segment reachable
        private final INDArray array;
        private final MemorySegment segment;
        private final DType dtype;
        /** The gradient-view element that element 0 of this array holds. */
        private final long origin;

        FlatArray(INDArray array) {
            this(array, 0);
        }

        FlatArray(INDArray array, long origin) {
            this.array = array;
            this.segment = ModelReplica.segmentOf(array);
            this.dtype = ModelReplica.dtypeOf(array.dataType());
            this.origin = origin;
        }

        /** Gradient-view element {@code e}. */
        @Override
        public double get(long e) {
            long i = e - origin;
            return switch (dtype) {
                case FLOAT64 -> segment.getAtIndex(ValueLayout.JAVA_DOUBLE_UNALIGNED, i);
                case FLOAT32 -> segment.getAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i);
                case BFLOAT16 -> BFloat16.toFloat(segment.getAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i));
            };
        }

        void set(long e, double v) {
            long i = e - origin;
            switch (dtype) {
                case FLOAT64 -> segment.setAtIndex(ValueLayout.JAVA_DOUBLE_UNALIGNED, i, v);
                case FLOAT32 -> segment.setAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i, (float) v);
                case BFLOAT16 -> segment.setAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i, BFloat16.fromFloat((float) v));
            }
        }

        /** {@code values} over the entry's elements that lie in [from, to). */
        void write(Entry entry, double[] values, long from, long to) {
            long a = Math.max(from, entry.start());
            long b = Math.min(to, entry.end());
            for (long i = a; i < b; i++) {
                set(i, values[(int) (i - entry.start())]);
            }
        }
    }
}
