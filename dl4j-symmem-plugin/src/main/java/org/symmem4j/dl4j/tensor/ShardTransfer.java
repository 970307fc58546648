package org.symmem4j.dl4j.tensor;

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.params.DefaultParamInitializer;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;

/**
 * How {@link TensorParallel} moves parameters and their updater state between an unsharded model and its shards: which
 * axis each tensor-parallel layer's parameter is split along, this rank's block of a whole one ({@code shard}), and every
 * rank's blocks joined in rank order ({@code gather}, an all-gather, bit for bit).
 */
final class ShardTransfer {

    private ShardTransfer() {
    }

    /**
     * The axis along which parameter {@code param} of {@code layer} is split over the ranks, or -1 where every rank holds
     * it whole: a column-parallel or vocabulary-parallel layer's {@code W} columns and bias entries (its outputs), a
     * row-parallel layer's or vocabulary-parallel embedding's {@code W} rows (its inputs; its bias is replicated).
     */
    static int splitAxis(Layer layer, String param) {
        if (layer instanceof ColumnParallelDenseLayerImpl || layer instanceof VocabParallelOutputLayerImpl) {
            return 1;
        }
        if ((layer instanceof RowParallelDenseLayerImpl || layer instanceof VocabParallelEmbeddingLayerImpl)
                && param.equals(DefaultParamInitializer.WEIGHT_KEY)) {
            return 0;
        }
        return -1;
    }

    /** This rank's block of {@code whole} for a shard shaped like {@code part}, split along {@code axis} (or whole when -1). */
    static INDArray cut(INDArray whole, INDArray part, int axis, int rank) {
        if (axis < 0) {
            return whole;
        }
        long k = part.size(Math.min(axis, part.rank() - 1)); // DL4J's biases may be vectors
        return block(whole, axis, rank * k, (rank + 1) * k);
    }

    /** Copies {@code from}'s parameters, or this rank's shard of them, into {@code to}. */
    static void copyShard(Layer from, Layer to, int rank) {
        for (Map.Entry<String, INDArray> p : to.paramTable(false).entrySet()) {
            p.getValue().assign(cut(from.getParam(p.getKey()), p.getValue(), splitAxis(to, p.getKey()), rank));
        }
    }

    /** Copies the updater state of {@code layer}'s parameters from the unsharded model's, or this rank's shard of it. */
    static void copyStateShard(String name, String key, Layer layer, ParameterUpdaterState from, ParameterUpdaterState to,
                                       int rank) {
        copyStateShard(name, key, key, layer, from, to, rank);
    }

    /** As above, the layer keyed {@code fromKey} in {@code from} and {@code toKey} in {@code to} (a range of the layers). */
    static void copyStateShard(String name, String fromKey, String toKey, Layer layer, ParameterUpdaterState from,
                               ParameterUpdaterState to, int rank) {
        for (String p : layer.paramTable(false).keySet()) {
            List<INDArray> source = from.of(fromKey, p);
            List<INDArray> target = to.of(toKey, p);
            requireSameSections(name, p, source.size(), target.size());
            for (int k = 0; k < target.size(); k++) {
                target.get(k).assign(cut(source.get(k), target.get(k), splitAxis(layer, p), rank));
            }
        }
    }

    /** Writes {@code from} (a layer of this rank's sharded model), gathered over the group where sharded, into {@code to}. */
    static void gatherLayer(String name, Layer from, Layer to, ArrayCollectives comm) {
        for (Map.Entry<String, INDArray> p : from.paramTable(false).entrySet()) {
            int axis = splitAxis(from, p.getKey());
            INDArray whole = axis < 0 ? p.getValue() : gatherBlocks(comm, p.getValue(), comm.size(), axis);
            requireShape(name, p.getKey(), to, whole);
            to.getParam(p.getKey()).assign(whole);
        }
    }

    /** Writes the updater state of {@code from}'s parameters, gathered over the group where sharded, into the target's. */
    static void gatherState(String name, String key, Layer from, ParameterUpdaterState fromState,
                                    ParameterUpdaterState toState, ArrayCollectives comm) {
        for (String p : from.paramTable(false).keySet()) {
            List<INDArray> source = fromState.of(key, p);
            List<INDArray> target = toState.of(key, p);
            requireSameSections(name, p, source.size(), target.size());
            int axis = splitAxis(from, p);
            for (int k = 0; k < source.size(); k++) {
                target.get(k).assign(axis < 0 ? source.get(k) : gatherBlocks(comm, source.get(k), comm.size(), axis));
            }
        }
    }

    static void requireSameSections(String layer, String param, int from, int to) {
        if (from != to) {
            throw new IllegalArgumentException(layer + " " + param + ": the updater keeps " + from + " values per parameter in"
                    + " the source but " + to + " in the target: their updater configurations differ (expected the"
                    + " configuration the network was sharded from; fix: pass a target built from that configuration)");
        }
    }

    static void requireShape(String layer, String param, Layer to, INDArray gathered) {
        if (to.paramTable(false).get(param) == null) {
            throw new IllegalArgumentException(layer + " of target has no parameter " + param + " (it has "
                    + to.paramTable(false).keySet() + "): expected the unsharded configuration (fix: pass a target built"
                    + " from the configuration the network was sharded from)");
        }
        if (!Arrays.equals(to.getParam(param).shape(), gathered.shape())) {
            throw new IllegalArgumentException(layer + " " + param + " of target has shape "
                    + Arrays.toString(to.getParam(param).shape()) + ", the gathered shards " + Arrays.toString(gathered.shape())
                    + ": expected the unsharded configuration (fix: pass a target built from the configuration the"
                    + " network was sharded from)");
        }
    }

    /** Every rank's {@code shard} (same shape), concatenated in rank order along {@code axis}: an all-gather, bit for bit. */
    static INDArray gatherBlocks(ArrayCollectives comm, INDArray shard, int size, int axis) {
        INDArray[][] gathered = comm.allGather(new INDArray[] {shard});
        List<INDArray> blocks = new java.util.ArrayList<>(size);
        for (int r = 0; r < size; r++) {
            blocks.add(gathered[r][0]);
        }
        return joinBlocks(blocks, axis);
    }

    /** {@code blocks} (every rank's, same shape) concatenated in rank order along {@code axis}. */
    static INDArray joinBlocks(List<INDArray> blocks, int axis) {
        INDArray shard = blocks.getFirst();
        long[] shape = shard.shape().clone();
        int along = Math.min(axis, shape.length - 1); // DL4J's biases are vectors
        long k = shape[along];
        shape[along] = k * blocks.size();
        INDArray all = Nd4j.createUninitialized(shard.dataType(), shape, 'c');
        for (int r = 0; r < blocks.size(); r++) {
            block(all, axis, r * k, (r + 1) * k).assign(blocks.get(r));
        }
        return all;
    }

    /** As {@link #gatherLayer}, with every rank's layer {@code from} in this process (rank order); replicated from rank 0. */
    static void joinLayer(String name, List<Layer> from, Layer to) {
        Layer first = from.getFirst();
        for (Map.Entry<String, INDArray> p : first.paramTable(false).entrySet()) {
            int axis = splitAxis(first, p.getKey());
            INDArray whole = axis < 0 ? p.getValue()
                    : joinBlocks(from.stream().map(l -> l.getParam(p.getKey())).toList(), axis);
            requireShape(name, p.getKey(), to, whole);
            to.getParam(p.getKey()).assign(whole);
        }
    }

    /**
     * As {@link #gatherState}, with every rank's updater state in this process (rank order): the layer keyed {@code fromKey}
     * in the shards' states, {@code toKey} in {@code toState}.
     */
    static void joinState(String name, String fromKey, String toKey, Layer first, List<ParameterUpdaterState> fromStates,
                          ParameterUpdaterState toState) {
        for (String p : first.paramTable(false).keySet()) {
            List<INDArray> target = toState.of(toKey, p);
            requireSameSections(name, p, fromStates.getFirst().of(fromKey, p).size(), target.size());
            int axis = splitAxis(first, p);
            for (int k = 0; k < target.size(); k++) {
                int section = k;
                target.get(k).assign(axis < 0 ? fromStates.getFirst().of(fromKey, p).get(k)
                        : joinBlocks(fromStates.stream().map(s -> s.of(fromKey, p).get(section)).toList(), axis));
            }
        }
    }

    /** Indices {@code [from, to)} of {@code array} along {@code axis} (rows 0, columns 1; a vector's own axis). */
    static INDArray block(INDArray array, int axis, long from, long to) {
        if (array.rank() == 1) {
            return array.get(NDArrayIndex.interval(from, to));
        }
        return axis == 0 ? array.get(NDArrayIndex.interval(from, to), NDArrayIndex.all())
                : array.get(NDArrayIndex.all(), NDArrayIndex.interval(from, to));
    }
}
