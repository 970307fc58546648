package org.symmem4j.dl4j.tensor;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.graph.GraphVertex;
import org.deeplearning4j.nn.conf.graph.LayerVertex;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * Every rank's shard of a tensor-parallel degree {@code T} re-sliced into one rank's shard of another degree {@code U}
 * (resuming a checkpoint on another tensor-parallel degree): each tensor-parallel layer's parameters are the T shards'
 * blocks joined in rank order along their split axis, and rank {@code u}'s block of that is the new shard's; the
 * updater state (Adam's moments, Nesterov's velocity) is cut as its parameter is ({@link ParameterUpdaterState});
 * replicated parameters and the counters are taken from rank 0's shard. Pure copies, so the result is bit for bit
 * {@code shard(join(shards), u, U)}, without building the unsharded network.
 *
 * <pre>
 *   column-parallel W (nIn x nOut), degree 2 -> 4:   [ r0 | r1 ]  joined  [ a | b | c | d ]  rank 2 takes c
 *   row-parallel W rows, vocabulary rows, column-parallel bias entries likewise; row-parallel bias: rank 0's
 * </pre>
 *
 * <p>{@link #check} runs before anything is written: the layers must be the same kinds, every replicated parameter the
 * same shape, and every split dimension divisible by {@code U} with the target's block exactly {@code 1/U} of it;
 * otherwise the refusal names the layer, its split dimension and the degrees that divide every split dimension.
 */
public final class TensorParallelReslice {

    private TensorParallelReslice() {
    }

    /**
     * Checks that {@code from} (every rank's shard of degree {@code from.size()}, rank order) re-slices into
     * {@code target}, a shard of degree {@code size}; nothing is written.
     *
     * @param from   every rank's shard of the old degree, in rank order
     * @param target this rank's shard of the new degree
     * @param size   the new degree
     * @throws IllegalArgumentException naming every layer that does not fit, its split dimension and the degrees that
     *                                  work
     */
    public static void check(List<MultiLayerNetwork> from, MultiLayerNetwork target, int size) {
        if (target.getLayers() == null) {
            target.init();
        }
        MultiLayerNetwork first = from.getFirst();
        if (first.getnLayers() != target.getnLayers()) {
            throw new IllegalArgumentException("tensor-parallel degree " + from.size() + "'s shards have "
                    + first.getnLayers() + " layers, this rank's network " + target.getnLayers() + ": expected the"
                    + " network the checkpoint was saved from (fix: shard that network's configuration for " + size + ")");
        }
        check(pairsOf(from, target), from.size(), size);
    }

    /**
     * As {@link #check(List, MultiLayerNetwork, int)}, for graphs (layers matched by vertex name).
     *
     * @param from   every rank's shard of the old degree, in rank order
     * @param target this rank's shard of the new degree
     * @param size   the new degree
     * @throws IllegalArgumentException naming every layer that does not fit, its split dimension and the degrees that
     *                                  work
     */
    public static void check(List<ComputationGraph> from, ComputationGraph target, int size) {
        if (target.getLayers() == null) {
            target.init();
        }
        check(pairsOf(from, target, size), from.size(), size);
    }

    /**
     * {@link #check}, then writes rank {@code rank}'s shard of degree {@code size} of the joined shards into
     * {@code target}: parameters, updater state (where the shards have it) and counters.
     *
     * @param from   every rank's shard of the old degree, in rank order, with their updater state
     * @param target this rank's shard of the new degree
     * @param rank   this rank, 0 .. size-1
     * @param size   the new degree
     * @throws IllegalArgumentException as {@link #check}, before anything is written
     */
    public static void reslice(List<MultiLayerNetwork> from, MultiLayerNetwork target, int rank, int size) {
        check(from, target, size);
        write(pairsOf(from, target), from.stream().map(ParameterUpdaterState::of).toList(), ParameterUpdaterState.of(target), rank);
        target.setIterationCount(from.getFirst().getIterationCount());
        target.setEpochCount(from.getFirst().getEpochCount());
    }

    /**
     * As {@link #reslice(List, MultiLayerNetwork, int, int)}, for graphs (layers matched by vertex name).
     *
     * @param from   every rank's shard of the old degree, in rank order, with their updater state
     * @param target this rank's shard of the new degree
     * @param rank   this rank, 0 .. size-1
     * @param size   the new degree
     * @throws IllegalArgumentException as {@link #check}, before anything is written
     */
    public static void reslice(List<ComputationGraph> from, ComputationGraph target, int rank, int size) {
        check(from, target, size);
        write(pairsOf(from, target, size), from.stream().map(ParameterUpdaterState::of).toList(), ParameterUpdaterState.of(target), rank);
        target.getConfiguration().setIterationCount(from.getFirst().getIterationCount());
        target.getConfiguration().setEpochCount(from.getFirst().getEpochCount());
    }

    /**
     * The configuration of every rank's shard of degree {@code size} of the network whose shard of another degree has
     * configuration {@code shard} (not changed): each tensor-parallel layer's split dimension (a column-parallel or
     * vocabulary output's nOut, a row-parallel or vocabulary embedding's nIn) scaled from its degree to {@code size}.
     * For reading a checkpoint of another degree that holds no configuration (ZeRO stage 3's parameter and state
     * shards) into networks of that degree's shape.
     *
     * @param shard a shard's configuration, of any degree
     * @param size  the degree to shape it for
     * @return a new configuration
     * @throws IllegalArgumentException when {@code size} does not divide a split dimension (naming it and the degrees
     *                                  that work)
     */
    public static MultiLayerConfiguration configurationFor(MultiLayerConfiguration shard, int size) {
        MultiLayerConfiguration conf = shard.clone();
        for (int l = 0; l < conf.getConfs().size(); l++) {
            redegree(conf.getConf(l).getLayer(), "layer " + l, size);
        }
        return conf;
    }

    /**
     * As {@link #configurationFor(MultiLayerConfiguration, int)}, for graphs.
     *
     * @param shard a shard's configuration, of any degree
     * @param size  the degree to shape it for
     * @return a new configuration
     * @throws IllegalArgumentException when {@code size} does not divide a split dimension
     */
    public static ComputationGraphConfiguration configurationFor(ComputationGraphConfiguration shard, int size) {
        ComputationGraphConfiguration conf = shard.clone();
        for (Map.Entry<String, GraphVertex> v : conf.getVertices().entrySet()) {
            if (v.getValue() instanceof LayerVertex lv) {
                redegree(lv.getLayerConf().getLayer(), "vertex '" + v.getKey() + "'", size);
            }
        }
        return conf;
    }

    /** A tensor-parallel layer's split dimension and degree set for {@code size}; any other layer left as it is. */
    private static void redegree(org.deeplearning4j.nn.conf.layers.Layer layer, String name, int size) {
        switch (layer) {
            case ColumnParallelDenseLayer c -> {
                c.setNOut(scaled(c.getNOut(), c.getTensorParallelSize(), size, name, "nOut"));
                c.setTensorParallelSize(size);
            }
            case RowParallelDenseLayer r -> {
                r.setNIn(scaled(r.getNIn(), r.getTensorParallelSize(), size, name, "nIn"));
                r.setTensorParallelSize(size);
            }
            case VocabParallelEmbeddingLayer e -> {
                e.setNIn(scaled(e.getNIn(), e.getTensorParallelSize(), size, name, "nIn"));
                e.setTensorParallelSize(size);
            }
            case VocabParallelOutputLayer o -> {
                o.setNOut(scaled(o.getNOut(), o.getTensorParallelSize(), size, name, "nOut"));
                o.setTensorParallelSize(size);
            }
            default -> {
            }
        }
    }

    /** A shard's block of {@code block} elements at degree {@code from}, at degree {@code size}. */
    private static long scaled(long block, int from, int size, String name, String dimension) {
        long whole = block * from;
        if (whole % size != 0) {
            throw new IllegalArgumentException("tensor-parallel degree " + from + "'s shards cannot be shaped for degree "
                    + size + ": " + name + " splits " + dimension + "=" + whole + ", not divisible by " + size
                    + ": expected a degree that divides it, degrees that work: " + degreesThatWork(List.of(whole))
                    + " (fix: use one of those tensor-parallel degrees)");
        }
        return whole / size;
    }

    /** Every rank's layer of one position (old degree) and this rank's (new degree); {@code name} keys the state. */
    private record Pair(String name, String key, List<Layer> from, Layer to) {
    }

    private static List<Pair> pairsOf(List<MultiLayerNetwork> from, MultiLayerNetwork target) {
        List<Pair> pairs = new ArrayList<>();
        for (int l = 0; l < target.getnLayers(); l++) {
            int layer = l;
            pairs.add(new Pair("layer " + l, String.valueOf(l), from.stream().map(n -> n.getLayer(layer)).toList(),
                    target.getLayer(l)));
        }
        return pairs;
    }

    private static List<Pair> pairsOf(List<ComputationGraph> from, ComputationGraph target, int size) {
        List<Pair> pairs = new ArrayList<>();
        for (Layer to : target.getLayers()) {
            String name = to.conf().getLayer().getLayerName();
            List<Layer> layers = new ArrayList<>();
            for (ComputationGraph g : from) {
                Layer l = g.getLayer(name);
                if (l == null) {
                    throw new IllegalArgumentException("tensor-parallel degree " + from.size() + "'s shards have no layer"
                            + " vertex '" + name + "', which this rank's graph has: expected the graph the checkpoint was"
                            + " saved from (fix: shard that graph's configuration for " + size + ")");
                }
                layers.add(l);
            }
            pairs.add(new Pair("vertex '" + name + "'", name, layers, to));
        }
        if (from.getFirst().getLayers().length != target.getLayers().length) {
            throw new IllegalArgumentException("tensor-parallel degree " + from.size() + "'s shards have "
                    + from.getFirst().getLayers().length + " layer vertices, this rank's graph " + target.getLayers().length
                    + ": expected the graph the checkpoint was saved from (fix: shard that graph's configuration for "
                    + size + ")");
        }
        return pairs;
    }

    /** The checks of {@link #check}: every problem collected, then one refusal. */
    private static void check(List<Pair> pairs, int oldSize, int size) {
        List<String> problems = new ArrayList<>();
        List<String> notDivisible = new ArrayList<>();
        List<Long> splitDims = new ArrayList<>();
        for (Pair p : pairs) {
            Layer first = p.from().getFirst();
            String kind = first.conf().getLayer().getClass().getSimpleName();
            String targetKind = p.to().conf().getLayer().getClass().getSimpleName();
            if (!kind.equals(targetKind)) {
                problems.add(p.name() + " is a " + kind + " in the checkpoint and a " + targetKind + " here");
                continue;
            }
            for (Map.Entry<String, INDArray> e : p.to().paramTable(false).entrySet()) {
                String param = e.getKey();
                INDArray mine = e.getValue();
                INDArray theirs = first.paramTable(false).get(param);
                if (theirs == null) {
                    problems.add(p.name() + " has parameter " + param + " here, none in the checkpoint");
                    continue;
                }
                int axis = ShardTransfer.splitAxis(p.to(), param);
                if (axis < 0) {
                    if (!Arrays.equals(theirs.shape(), mine.shape())) {
                        problems.add(p.name() + " " + param + " (replicated) has shape " + Arrays.toString(theirs.shape())
                                + " in the checkpoint and " + Arrays.toString(mine.shape()) + " here");
                    }
                    continue;
                }
                int along = Math.min(axis, mine.rank() - 1);
                long whole = theirs.size(along) * oldSize;
                if (!param.equals(org.deeplearning4j.nn.params.DefaultParamInitializer.BIAS_KEY)) {
                    splitDims.add(whole);
                }
                if (whole % size != 0) {
                    notDivisible.add(p.name() + " (" + kind + ") splits " + dimension(axis) + "=" + whole
                            + ", not divisible by " + size);
                } else if (mine.size(along) * size != whole) {
                    problems.add(p.name() + " " + param + " splits " + dimension(axis) + "=" + whole + " in the"
                            + " checkpoint, " + mine.size(along) * size + " here (" + mine.size(along) + " per rank of "
                            + size + ")");
                }
            }
        }
        if (!notDivisible.isEmpty()) {
            throw new IllegalArgumentException("tensor-parallel degree " + oldSize + "'s checkpoint cannot be re-sliced"
                    + " for degree " + size + ": " + String.join("; ", notDivisible) + ": expected a degree that divides"
                    + " every split dimension, degrees that work: " + degreesThatWork(splitDims) + " (fix: resume on one"
                    + " of those tensor-parallel degrees)");
        }
        if (!problems.isEmpty()) {
            throw new IllegalArgumentException("tensor-parallel degree " + oldSize + "'s checkpoint does not fit this"
                    + " rank's shard of degree " + size + ": " + String.join("; ", problems) + ": expected the network"
                    + " the checkpoint was saved from, sharded for " + size + " (fix: shard that network's configuration"
                    + " with TensorParallel.shard(network, rank, " + size + ", ...) with the same blocks; degrees that"
                    + " work: " + degreesThatWork(splitDims) + ")");
        }
    }

    /**
     * The tensor-parallel degrees that divide every one of {@code splitDims}: the divisors of their greatest common
     * divisor.
     *
     * @param splitDims the split dimensions (a column-parallel layer's nOut, a row-parallel layer's nIn, a vocabulary)
     * @return those degrees, ascending
     */
    public static List<Integer> degreesThatWork(List<Long> splitDims) {
        long g = 0;
        for (long d : splitDims) {
            g = gcd(g, d);
        }
        TreeSet<Integer> degrees = new TreeSet<>();
        for (long d = 1; d * d <= g; d++) {
            if (g % d == 0) {
                degrees.add(Math.toIntExact(d));
                degrees.add(Math.toIntExact(g / d));
            }
        }
        return List.copyOf(degrees);
    }

    private static long gcd(long a, long b) {
        return b == 0 ? a : gcd(b, a % b);
    }

    /** What a split axis is, for messages: a column-parallel or vocabulary output's nOut, else nIn. */
    private static String dimension(int axis) {
        return axis == 1 ? "nOut" : "nIn";
    }

    /** Writes every pair's re-sliced parameters and updater state; checked before. */
    private static void write(List<Pair> pairs, List<ParameterUpdaterState> fromStates, ParameterUpdaterState toState,
                              int rank) {
        for (Pair p : pairs) { // the updaters alike (Adam here, Adam there), before anything is written
            for (String param : p.to().paramTable(false).keySet()) {
                ShardTransfer.requireSameSections(p.name(), param, fromStates.getFirst().of(keyOf(p), param).size(),
                        toState.of(keyOf(p), param).size());
            }
        }
        for (Pair p : pairs) {
            for (Map.Entry<String, INDArray> e : p.to().paramTable(false).entrySet()) {
                int axis = ShardTransfer.splitAxis(p.to(), e.getKey());
                INDArray whole = axis < 0 ? p.from().getFirst().getParam(e.getKey())
                        : ShardTransfer.joinBlocks(p.from().stream().map(l -> l.getParam(e.getKey())).toList(), axis);
                e.getValue().assign(ShardTransfer.cut(whole, e.getValue(), axis, rank));
            }
        }
        for (Pair p : pairs) {
            String key = keyOf(p);
            for (String param : p.to().paramTable(false).keySet()) {
                List<INDArray> target = toState.of(key, param);
                int axis = ShardTransfer.splitAxis(p.to(), param);
                for (int k = 0; k < target.size(); k++) {
                    int section = k;
                    INDArray whole = axis < 0 ? fromStates.getFirst().of(key, param).get(k)
                            : ShardTransfer.joinBlocks(fromStates.stream().map(s -> s.of(key, param).get(section))
                                    .toList(), axis);
                    target.get(k).assign(ShardTransfer.cut(whole, target.get(k), axis, rank));
                }
            }
        }
    }

    /** The layer's key in {@link ParameterUpdaterState}: its index in a network, its vertex name in a graph. */
    private static String keyOf(Pair p) {
        return p.key();
    }
}
