package org.symmem4j.dl4j.tensor;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.TreeSet;
import org.deeplearning4j.nn.api.Layer;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.GradientNormalization;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.activations.IActivation;
import org.nd4j.linalg.activations.impl.ActivationSoftmax;
import org.symmem4j.dl4j.nd4j.ArrayCollectives;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.Invariants;

/**
 * Tensor parallelism for a DL4J {@link MultiLayerNetwork}, Megatron's way: each chosen dense layer
 * becomes column-parallel and the dense layer after it row-parallel, so the block's hidden features
 * are split over the tensor-parallel group and cost one all-reduce forward and one backward.
 *
 * <pre>{@code
 * // on every rank of the tensor-parallel group, from the same unsharded network (same seed or file):
 * MultiLayerNetwork mine = TensorParallel.shard(unsharded, tp.rank(), tp.worldSize(), 0);  // layers 0 and 1
 * try (Communicator c = Communicator.create(tp)) {
 *     TensorParallel.attach(mine, c);
 *     mine.fit(batches);                        // the same batches on every rank
 *     TensorParallel.gather(mine, c, unsharded); // collective: the trained unsharded network, on every rank
 * }
 * }</pre>
 *
 * <p>Every rank trains on the same batches; the layers outside the blocks, the row-parallel layer's
 * bias and every output are replicated and stay bitwise equal across ranks (sums add the ranks in rank
 * order). The sharded network equals the unsharded one to rounding, step after step: the same
 * parameters, each held by one rank (the column-parallel layer's {@code W} columns and {@code b}, the
 * row-parallel layer's {@code W} rows), with element-wise updaters (SGD, Adam, ...) updating each element as
 * the unsharded network would. Not supported (refused by {@link #attach}, naming the layer): softmax
 * (or any activation across features) on a column-parallel layer, dropout or weight noise on either layer
 * (each rank would draw its own), layer normalization, and gradient normalization by a layer's norm.
 * DL4J's score adds this rank's share of the L1/L2 terms only. {@link #shard} and {@link #gather} carry the updater
 * state with the parameters (Adam's moments cut and joined as their parameters are), so a network sharded in the middle
 * of training, or gathered, saved and resumed unsharded, goes on as the unsharded one would.
 */
public final class TensorParallel {

    private TensorParallel() {
    }

    /**
     * This rank's shard of {@code unsharded}: a new network in which layer {@code c} of every
     * {@code c} in {@code columnLayers} is a {@link ColumnParallelDenseLayer} holding output columns
     * {@code [rank k, (rank+1) k)} and layer {@code c + 1} a {@link RowParallelDenseLayer} holding
     * those input rows; every other layer a copy. Parameters and their updater state (once {@code unsharded} has
     * trained) are copied from {@code unsharded}, so the shards of every rank together are exactly {@code unsharded},
     * and training goes on from where it was. Counters (iteration, epoch) are copied.
     *
     * @param unsharded    the whole network (initialized if it is not)
     * @param rank         this rank in the tensor-parallel group, {@code 0 <= rank < size}
     * @param size         the tensor-parallel group's size, at least 1
     * @param columnLayers indices of the dense layers to make column-parallel; each followed by a dense layer
     * @return this rank's network; attach it with {@link #attach} before training
     * @throws IllegalArgumentException when a chosen layer or its successor is not a {@code DenseLayer},
     *                                  blocks overlap, or the block's width is not divisible by {@code size}
     */
    public static MultiLayerNetwork shard(MultiLayerNetwork unsharded, int rank, int size, int... columnLayers) {
        return shard(unsharded, rank, size, java.util.EnumSet.noneOf(VocabularyParallel.class), columnLayers);
    }

    /** The layers at a network's ends whose vocabulary can be split over the tensor-parallel group (Megatron's). */
    public enum VocabularyParallel {
        /** The first layer, an {@code EmbeddingLayer}: its rows split ({@link VocabParallelEmbeddingLayer}). */
        EMBEDDING,
        /** The last layer, a softmax {@code OutputLayer} with {@code LossMCXENT}: its columns split ({@link VocabParallelOutputLayer}). */
        OUTPUT
    }

    /**
     * As {@link #shard(MultiLayerNetwork, int, int, int...)}, and the vocabulary of the network's ends in
     * {@code vocabularyParallel} split too: {@link VocabularyParallel#EMBEDDING} makes the first layer — an
     * {@code EmbeddingLayer} — a {@link VocabParallelEmbeddingLayer} holding vocabulary rows {@code [rank k, (rank+1) k)}
     * (each rank looks up the indices it holds, the rows are summed over the ranks); {@link VocabularyParallel#OUTPUT}
     * makes the last layer — a softmax {@code OutputLayer} with DL4J's multi-class cross-entropy — a
     * {@link VocabParallelOutputLayer} holding vocabulary columns {@code [rank k, (rank+1) k)}, whose logits never sit
     * whole on one rank in training (the softmax's maximum and sum cross the group as one number per example each) and
     * whose {@code output()} gives every rank the whole vocabulary's probabilities. Equal to the unsharded network to
     * rounding, as the blocks are.
     *
     * @param unsharded          the whole network (initialized if it is not)
     * @param rank               this rank in the tensor-parallel group
     * @param size               the tensor-parallel group's size, dividing the split vocabularies
     * @param vocabularyParallel the ends to split (empty: as {@link #shard(MultiLayerNetwork, int, int, int...)})
     * @param columnLayers       indices of the dense layers to make column-parallel
     * @return this rank's network; attach it with {@link #attach} before training
     * @throws IllegalArgumentException as {@link #shard(MultiLayerNetwork, int, int, int...)}, and when an end to split is
     *                                  not of its kind (an {@code EmbeddingLayer}; a softmax cross-entropy
     *                                  {@code OutputLayer} without class weights) or its vocabulary is not divisible by
     *                                  {@code size}
     */
    public static MultiLayerNetwork shard(MultiLayerNetwork unsharded, int rank, int size,
                                          java.util.Set<VocabularyParallel> vocabularyParallel, int... columnLayers) {
        java.util.Objects.requireNonNull(vocabularyParallel, "vocabularyParallel");
        return shard(unsharded, rank, size, vocabularyParallel.isEmpty() ? java.util.EnumSet.noneOf(VocabularyParallel.class)
                : java.util.EnumSet.copyOf(vocabularyParallel), columnLayers);
    }

    private static MultiLayerNetwork shard(MultiLayerNetwork unsharded, int rank, int size,
                                           java.util.EnumSet<VocabularyParallel> vocabularyParallel, int... columnLayers) {
        requireRank(rank, size);
        if (unsharded.getLayers() == null) {
            unsharded.init();
        }
        MultiLayerNetwork sharded = new MultiLayerNetwork(shardConfiguration(unsharded.getLayerWiseConfigurations(), size,
                vocabularyParallel, columnLayers));
        sharded.init();
        reshardInto(unsharded, rank, sharded);
        return sharded;
    }

    /**
     * The configuration of every rank's shard of a network of configuration {@code unsharded} (the same for every rank:
     * only the values a rank holds differ), as {@link #shard(MultiLayerNetwork, int, int, int...)} makes it, with its
     * checks, without building or initialising a network: for trainers that build only some of a shard's layers (a
     * pipeline rank's stages) and fill them with {@link #reshardInto(MultiLayerNetwork, int, MultiLayerNetwork, int)}.
     *
     * @param unsharded    the whole network's configuration (not changed)
     * @param size         the tensor-parallel group's size, at least 1
     * @param columnLayers indices of the dense layers to make column-parallel; each followed by a dense layer
     * @return a new configuration, the shards'
     * @throws IllegalArgumentException as {@link #shard(MultiLayerNetwork, int, int, int...)}
     */
    public static MultiLayerConfiguration shardConfiguration(MultiLayerConfiguration unsharded, int size,
                                                             int... columnLayers) {
        requireRank(0, size);
        return shardConfiguration(unsharded, size, java.util.EnumSet.noneOf(VocabularyParallel.class), columnLayers);
    }

    private static MultiLayerConfiguration shardConfiguration(MultiLayerConfiguration unsharded, int size,
                                                              java.util.EnumSet<VocabularyParallel> vocabularyParallel,
                                                              int... columnLayers) {
        MultiLayerConfiguration conf = unsharded.clone();
        List<NeuralNetConfiguration> confs = conf.getConfs();
        TreeSet<Integer> blocks = new TreeSet<>();
        for (int c : columnLayers) {
            if (c < 0 || c + 1 >= confs.size()) {
                throw new IllegalArgumentException("column-parallel layer " + c + ": expected 0 <= layer < " + (confs.size() - 1)
                        + " (the layer after it becomes row-parallel; the network has"
                        + " " + confs.size() + " layers; fix: pass the index of a DenseLayer followed by"
                        + " another DenseLayer)");
            }
            for (int l : new int[] {c, c + 1}) {
                if (confs.get(l).getLayer().getClass() != DenseLayer.class) {
                    throw new IllegalArgumentException("layer " + l + " is a " + confs.get(l).getLayer().getClass().getSimpleName()
                            + ": a tensor-parallel block is two DenseLayers (layer " + c + " column-parallel, layer " + (c + 1)
                            + " row-parallel); fix: choose another layer");
                }
            }
            if (blocks.contains(c) || blocks.contains(c - 1) || blocks.contains(c + 1)) {
                throw new IllegalArgumentException("column-parallel layers " + Arrays.toString(columnLayers) + " overlap at "
                        + c + ": each block takes two layers of its own"
                    + " (fix: list column-parallel layers at least two apart)");
            }
            DenseLayer column = (DenseLayer) confs.get(c).getLayer();
            if (column.getNOut() % size != 0) {
                throw new IllegalArgumentException("layer " + c + " has nOut=" + column.getNOut() + ", not divisible by the"
                        + " tensor-parallel size " + size + " (its outputs are split evenly; degrees that work: "
                        + TensorParallelReslice.degreesThatWork(List.of(column.getNOut())) + "; fix: choose one of those"
                        + " degrees, or a width that is divisible)");
            }
            blocks.add(c);
        }
        for (int c : blocks) {
            confs.get(c).setLayer(ColumnParallelDenseLayer.shardOf((DenseLayer) confs.get(c).getLayer(), size));
            confs.get(c + 1).setLayer(RowParallelDenseLayer.shardOf((DenseLayer) confs.get(c + 1).getLayer(), size));
        }
        if (vocabularyParallel.contains(VocabularyParallel.EMBEDDING)) {
            org.deeplearning4j.nn.conf.layers.Layer embedding = confs.get(0).getLayer();
            if (embedding.getClass() != org.deeplearning4j.nn.conf.layers.EmbeddingLayer.class) {
                throw new IllegalArgumentException("layer 0 is a " + embedding.getClass().getSimpleName() + ": a"
                        + " vocabulary-parallel embedding replaces the network's first layer, which must be an"
                        + " EmbeddingLayer"
                    + " (fix: make layer 0 an EmbeddingLayer, or leave the embedding whole)");
            }
            confs.get(0).setLayer(VocabParallelEmbeddingLayer.shardOf((org.deeplearning4j.nn.conf.layers.EmbeddingLayer) embedding,
                    size));
        }
        if (vocabularyParallel.contains(VocabularyParallel.OUTPUT)) {
            int last = confs.size() - 1;
            org.deeplearning4j.nn.conf.layers.Layer output = confs.get(last).getLayer();
            if (output.getClass() != org.deeplearning4j.nn.conf.layers.OutputLayer.class) {
                throw new IllegalArgumentException("layer " + last + " is a " + output.getClass().getSimpleName() + ": a"
                        + " vocabulary-parallel output replaces the network's last layer, which must be an OutputLayer"
                    + " (fix: end the network with an OutputLayer, or leave the output whole)");
            }
            confs.get(last).setLayer(VocabParallelOutputLayer.shardOf((org.deeplearning4j.nn.conf.layers.OutputLayer) output,
                    size));
        }
        return conf;
    }

    /**
     * Binds every tensor-parallel layer of {@code network} to {@code communicator}, after checking that
     * each can be split exactly. Call on every rank, with the communicator of the tensor-parallel
     * group (host transport), before training or inference; again after cloning or loading the network.
     *
     * @param network      a network made by {@link #shard} (on this rank)
     * @param communicator over the tensor-parallel group; the network's layers use it from the training thread
     * @throws IllegalArgumentException when a layer's settings cannot be split exactly (named), or the
     *                                  network was sharded for another group size than the communicator's
     */
    public static void attach(MultiLayerNetwork network, Communicator communicator) {
        attachLayers(network.getLayers(), communicator);
    }

    /**
     * As {@link #attach(MultiLayerNetwork, Communicator)}, for a graph made by
     * {@link #shard(ComputationGraph, int, int, String...)}.
     *
     * @param graph        this rank's sharded graph
     * @param communicator over the tensor-parallel group
     * @throws IllegalArgumentException when a layer's settings cannot be split exactly (named)
     */
    public static void attach(ComputationGraph graph, Communicator communicator) {
        attachLayers(graph.getLayers(), communicator);
    }

    /**
     * Unbinds every tensor-parallel layer of {@code model} from its communicator (the inverse of {@link #attach}): for an
     * owner about to close the communicator it attached, so that the network holds no closed communicator; using the
     * network then fails with a clear error until it is attached again. Nothing happens for a network without
     * tensor-parallel layers.
     *
     * @param model a {@link MultiLayerNetwork} or {@link ComputationGraph}
     */
    public static void detach(org.deeplearning4j.nn.api.Model model) {
        Layer[] layers = model instanceof MultiLayerNetwork m ? m.getLayers() : ((ComputationGraph) model).getLayers();
        for (Layer layer : layers == null ? new Layer[0] : layers) {
            if (layer instanceof TensorParallelLayer tp) {
                tp.attach(null);
            }
        }
    }

    /**
     * This rank's shard of a {@link ComputationGraph}: each vertex named in {@code columnVertices}
     * (a dense layer) becomes column-parallel, and the one vertex that consumes it (a dense layer whose
     * only input it is) row-parallel; everything else is copied. As
     * {@link #shard(MultiLayerNetwork, int, int, int...)} otherwise.
     *
     * @param unsharded      the whole graph (initialized if it is not)
     * @param rank           this rank in the tensor-parallel group
     * @param size           the tensor-parallel group's size
     * @param columnVertices names of the dense-layer vertices to make column-parallel
     * @return this rank's graph; attach it with {@link #attach(ComputationGraph, Communicator)}
     * @throws IllegalArgumentException when a vertex is not a dense layer, is not consumed by exactly
     *                                  one dense layer that takes only it, or its width is not divisible
     */
    public static ComputationGraph shard(ComputationGraph unsharded, int rank, int size, String... columnVertices) {
        return shard(unsharded, rank, size, java.util.Set.of(), columnVertices);
    }

    /**
     * As {@link #shard(ComputationGraph, int, int, String...)}, and the vocabulary of the graph's ends in
     * {@code vocabularyParallel} split too, as {@link #shard(MultiLayerNetwork, int, int, java.util.Set, int...)} splits a
     * network's: {@link VocabularyParallel#EMBEDDING} every {@code EmbeddingLayer} vertex that takes a graph input,
     * {@link VocabularyParallel#OUTPUT} every graph output (each must be a softmax {@code OutputLayer} with
     * {@code LossMCXENT}).
     *
     * @param unsharded          the whole graph (initialized if it is not)
     * @param rank               this rank in the tensor-parallel group
     * @param size               the tensor-parallel group's size, dividing the split vocabularies
     * @param vocabularyParallel the ends to split
     * @param columnVertices     names of the dense-layer vertices to make column-parallel
     * @return this rank's graph; attach it with {@link #attach(ComputationGraph, Communicator)}
     * @throws IllegalArgumentException as {@link #shard(ComputationGraph, int, int, String...)}, and when an end to split
     *                                  has none of its kind, is not of its kind, or its vocabulary is not divisible
     */
    public static ComputationGraph shard(ComputationGraph unsharded, int rank, int size,
                                         java.util.Set<VocabularyParallel> vocabularyParallel, String... columnVertices) {
        java.util.Objects.requireNonNull(vocabularyParallel, "vocabularyParallel");
        requireRank(rank, size);
        if (unsharded.getLayers() == null) {
            unsharded.init();
        }
        ComputationGraphConfiguration conf = unsharded.getConfiguration().clone();
        java.util.Map<String, org.deeplearning4j.nn.conf.graph.GraphVertex> vertices = conf.getVertices();
        java.util.Map<String, List<String>> inputs = conf.getVertexInputs();
        java.util.Set<String> used = new java.util.HashSet<>();
        List<String[]> blocks = new ArrayList<>();
        for (String column : columnVertices) {
            DenseLayer columnLayer = denseOf(vertices, column);
            List<String> consumers = inputs.entrySet().stream().filter(e -> e.getValue().contains(column))
                    .map(java.util.Map.Entry::getKey).sorted().toList();
            if (consumers.size() != 1 || !inputs.get(consumers.getFirst()).equals(List.of(column))
                    || conf.getNetworkOutputs().contains(column)) {
                throw new IllegalArgumentException("vertex '" + column + "' feeds " + consumers + (conf.getNetworkOutputs()
                        .contains(column) ? " and the graph's output" : "") + ": a tensor-parallel block is a dense layer"
                        + " consumed by exactly one dense layer that takes only it (the row-parallel half; fix:"
                        + " choose a"
                        + " column vertex whose only consumer is the next dense layer)");
            }
            String row = consumers.getFirst();
            denseOf(vertices, row);
            if (!used.add(column) || !used.add(row)) {
                throw new IllegalArgumentException("column-parallel vertices " + Arrays.toString(columnVertices) + " overlap at '"
                        + column + "': each block takes two vertices of its own"
                    + " (fix: list each vertex in one block only)");
            }
            if (columnLayer.getNOut() % size != 0) {
                throw new IllegalArgumentException("vertex '" + column + "' has nOut=" + columnLayer.getNOut() + ", not divisible"
                        + " by the tensor-parallel size " + size + " (its outputs are split evenly; degrees that work: "
                        + TensorParallelReslice.degreesThatWork(List.of(columnLayer.getNOut())) + "; fix: choose one of"
                        + " those degrees, or a width that is divisible)");
            }
            blocks.add(new String[] {column, row});
        }
        for (String[] block : blocks) {
            layerConfOf(vertices, block[0]).setLayer(ColumnParallelDenseLayer.shardOf(denseOf(vertices, block[0]), size));
            layerConfOf(vertices, block[1]).setLayer(RowParallelDenseLayer.shardOf(denseOf(vertices, block[1]), size));
        }
        if (vocabularyParallel.contains(VocabularyParallel.EMBEDDING)) {
            List<String> embeddings = new ArrayList<>();
            for (java.util.Map.Entry<String, List<String>> e : new java.util.TreeMap<>(inputs).entrySet()) {
                if (conf.getNetworkInputs().containsAll(e.getValue()) && vertices.get(e.getKey()) instanceof
                        org.deeplearning4j.nn.conf.graph.LayerVertex v && v.getLayerConf().getLayer().getClass()
                        == org.deeplearning4j.nn.conf.layers.EmbeddingLayer.class) {
                    embeddings.add(e.getKey());
                }
            }
            if (embeddings.isEmpty()) {
                throw new IllegalArgumentException("no EmbeddingLayer vertex takes a graph input " + conf.getNetworkInputs()
                        + ": a vocabulary-parallel embedding splits those (fix: feed a graph input into an"
                        + " EmbeddingLayer, or leave the embedding whole)");
            }
            for (String name : embeddings) {
                NeuralNetConfiguration layerConf = layerConfOf(vertices, name);
                layerConf.setLayer(VocabParallelEmbeddingLayer.shardOf(
                        (org.deeplearning4j.nn.conf.layers.EmbeddingLayer) layerConf.getLayer(), size));
            }
        }
        if (vocabularyParallel.contains(VocabularyParallel.OUTPUT)) {
            for (String name : conf.getNetworkOutputs()) {
                NeuralNetConfiguration layerConf = layerConfOf(vertices, name);
                if (layerConf.getLayer().getClass() != org.deeplearning4j.nn.conf.layers.OutputLayer.class) {
                    throw new IllegalArgumentException("graph output '" + name + "' is a " + layerConf.getLayer().getClass()
                            .getSimpleName() + ": a vocabulary-parallel output splits the graph's outputs, which must be"
                            + " OutputLayers (fix: make the outputs OutputLayers, or leave the output whole)");
                }
                layerConf.setLayer(VocabParallelOutputLayer.shardOf((org.deeplearning4j.nn.conf.layers.OutputLayer)
                        layerConf.getLayer(), size));
            }
        }
        ComputationGraph sharded = new ComputationGraph(conf);
        sharded.init();
        for (Layer to : sharded.getLayers()) {
            String name = to.conf().getLayer().getLayerName();
            ShardTransfer.copyShard(unsharded.getLayer(name), to, rank);
        }
        if (unsharded.getUpdater(false) != null) {
            ParameterUpdaterState from = ParameterUpdaterState.of(unsharded);
            ParameterUpdaterState to = ParameterUpdaterState.of(sharded);
            for (Layer layer : sharded.getLayers()) {
                String name = layer.conf().getLayer().getLayerName();
                ShardTransfer.copyStateShard("vertex '" + name + "'", name, layer, from, to, rank);
            }
        }
        // a graph's counters live in its configuration
        sharded.getConfiguration().setIterationCount(unsharded.getIterationCount());
        sharded.getConfiguration().setEpochCount(unsharded.getEpochCount());
        return sharded;
    }

    private static void requireRank(int rank, int size) {
        if (size < 1 || rank < 0 || rank >= size) {
            throw new IllegalArgumentException("rank=" + rank + " size=" + size + " expected size >= 1 and 0 <="
                    + " rank < size (fix: pass the"
                    + " communicator's rank and size)");
        }
    }

    private static NeuralNetConfiguration layerConfOf(java.util.Map<String, org.deeplearning4j.nn.conf.graph.GraphVertex> vertices,
                                                      String name) {
        if (!(vertices.get(name) instanceof org.deeplearning4j.nn.conf.graph.LayerVertex v)) {
            throw new IllegalArgumentException("vertex '" + name + "' is " + (vertices.get(name) == null ? "not in the graph"
                    : "a " + vertices.get(name).getClass().getSimpleName()) + ": a tensor-parallel block is two DenseLayer"
                    + " vertices; fix: choose another vertex (the graph has " + new TreeSet<>(vertices.keySet()) + ")");
        }
        return v.getLayerConf();
    }

    private static DenseLayer denseOf(java.util.Map<String, org.deeplearning4j.nn.conf.graph.GraphVertex> vertices, String name) {
        org.deeplearning4j.nn.conf.layers.Layer layer = layerConfOf(vertices, name).getLayer();
        if (layer.getClass() != DenseLayer.class) {
            throw new IllegalArgumentException("vertex '" + name + "' is a " + layer.getClass().getSimpleName() + ": a"
                    + " tensor-parallel block is two DenseLayers; fix: choose another vertex");
        }
        return (DenseLayer) layer;
    }

    private static void attachLayers(Layer[] layers, Communicator communicator) {
        ArrayCollectives comm = new ArrayCollectives(communicator);
        requireSplittable(layers, comm.size());
        for (Layer layer : layers) {
            if (layer instanceof TensorParallelLayer tp) {
                tp.attach(comm);
            }
        }
    }

    /**
     * Checks, without a group, what {@link #attach} checks before it binds: that every tensor-parallel layer of
     * {@code network} was sharded for {@code size} ranks and can be split exactly (no dropout or weight noise, no layer
     * normalization, no gradient normalization by a layer's norm, an element-wise activation on a column-parallel
     * layer). For trainers that shard a network themselves and refuse bad settings before any rank starts.
     *
     * @param network a network made by {@link #shard}
     * @param size    the tensor-parallel group's size it will be attached to
     * @throws IllegalArgumentException naming every layer that cannot be split exactly, and the fix
     */
    public static void requireSplittable(MultiLayerNetwork network, int size) {
        if (network.getLayers() == null) {
            network.init();
        }
        requireSplittable(network.getLayers(), size);
    }

    private static void requireSplittable(Layer[] layers, int size) {
        List<String> problems = new ArrayList<>();
        for (Layer layer : layers) {
            if (!(layer instanceof TensorParallelLayer)) {
                continue;
            }
            org.deeplearning4j.nn.conf.layers.BaseLayer conf = (org.deeplearning4j.nn.conf.layers.BaseLayer) layer.conf().getLayer();
            String kind = conf.getClass().getSimpleName() + " '" + (conf.getLayerName() != null ? conf.getLayerName()
                    : "layer" + layer.getIndex()) + "'";
            int shardedFor = switch (conf) {
                case TensorParallelDenseLayer d -> d.getTensorParallelSize();
                case VocabParallelOutputLayer o -> o.getTensorParallelSize();
                case VocabParallelEmbeddingLayer e -> e.getTensorParallelSize();
                default -> throw Invariants.violated("unknown tensor-parallel layer configuration " + conf.getClass());
            };
            if (shardedFor != size) {
                problems.add(kind + " was sharded for " + shardedFor + " ranks, the group has " + size);
            }
            if (conf.getIDropout() != null) {
                problems.add(kind + " has dropout on its input (each rank would draw its own mask)");
            }
            if (conf.getWeightNoise() != null) {
                problems.add(kind + " has weight noise (each rank would draw its own)");
            }
            if (conf instanceof TensorParallelDenseLayer dense && dense.hasLayerNorm()) {
                problems.add(kind + " has layer normalization (it normalizes over all output features)");
            }
            GradientNormalization g = conf.getGradientNormalization();
            if (g != null && g != GradientNormalization.None && g != GradientNormalization.ClipElementWiseAbsoluteValue) {
                problems.add(kind + " has gradient normalization " + g + " (by the layer's norm, which no rank holds)");
            }
            IActivation activation = conf.getActivationFn();
            if (conf instanceof ColumnParallelDenseLayer && activation instanceof ActivationSoftmax) {
                problems.add(kind + " has activation " + activation + " (across features; a column-parallel layer's"
                        + " activation must be element-wise)");
            }
        }
        if (!problems.isEmpty()) {
            throw new IllegalArgumentException("the network cannot be split exactly: " + String.join("; ", problems)
                    + " (fix: correct those layers' settings in the unsharded network and shard it again)");
        }
    }

    /**
     * Writes {@code unsharded}'s parameters, updater state and counters into {@code shard}, an existing shard of rank
     * {@code rank} (made by {@link #shard(MultiLayerNetwork, int, int, int...)} from a network of that configuration):
     * what {@code shard} makes, without building a new network. The updater state is copied only where
     * {@code unsharded} has an updater.
     *
     * @param unsharded the whole network
     * @param rank      the shard's rank in the tensor-parallel group
     * @param shard     the shard to overwrite
     * @throws IllegalArgumentException when the layer counts differ (another configuration)
     */
    public static void reshardInto(MultiLayerNetwork unsharded, int rank, MultiLayerNetwork shard) {
        if (unsharded.getLayers() == null) {
            unsharded.init();
        }
        if (unsharded.getnLayers() != shard.getnLayers()) {
            throw new IllegalArgumentException("the shard has " + shard.getnLayers() + " layers, the network "
                    + unsharded.getnLayers() + ": expected the configuration the shard was made from (fix: shard that"
                    + " network with TensorParallel.shard)");
        }
        reshardInto(unsharded, rank, shard, 0);
    }

    /**
     * As {@link #reshardInto(MultiLayerNetwork, int, MultiLayerNetwork)}, into {@code shardLayers}, a network of a
     * contiguous range of the shard's layers starting at layer {@code firstLayer} (a pipeline stage of the shard): its
     * layer {@code l} takes rank {@code rank}'s block of {@code unsharded}'s layer {@code firstLayer + l}, parameters and
     * updater state (where {@code unsharded} has an updater), and the counters.
     *
     * @param unsharded   the whole network
     * @param rank        the shard's rank in the tensor-parallel group
     * @param shardLayers the layers to overwrite, of the shard configuration ({@link #shardConfiguration})
     * @param firstLayer  the index in {@code unsharded} of {@code shardLayers}' first layer
     * @throws IllegalArgumentException when the range does not lie inside {@code unsharded}'s layers
     */
    public static void reshardInto(MultiLayerNetwork unsharded, int rank, MultiLayerNetwork shardLayers, int firstLayer) {
        if (unsharded.getLayers() == null) {
            unsharded.init();
        }
        requireRange(firstLayer, shardLayers.getnLayers(), unsharded.getnLayers());
        for (int l = 0; l < shardLayers.getnLayers(); l++) {
            ShardTransfer.copyShard(unsharded.getLayer(firstLayer + l), shardLayers.getLayer(l), rank);
        }
        if (unsharded.getUpdater(false) != null) {
            ParameterUpdaterState from = ParameterUpdaterState.of(unsharded);
            ParameterUpdaterState to = ParameterUpdaterState.of(shardLayers);
            for (int l = 0; l < shardLayers.getnLayers(); l++) {
                ShardTransfer.copyStateShard("layer " + (firstLayer + l), String.valueOf(firstLayer + l),
                        String.valueOf(l), shardLayers.getLayer(l), from, to, rank);
            }
        }
        shardLayers.setIterationCount(unsharded.getIterationCount());
        shardLayers.setEpochCount(unsharded.getEpochCount());
    }

    /**
     * As {@link #join}, for a contiguous range of the layers: {@code shards} are every rank's network of the same range
     * (a pipeline stage of each shard, in rank order), written into {@code target}'s layers {@code firstLayer ..}
     * (parameters and updater state; not the counters, which the caller sets once for the whole network). Bit for bit
     * what {@link #join} writes into those layers.
     *
     * @param shards     every rank's network of the range, in rank order
     * @param target     an unsharded network of the configuration the shards were made from
     * @param firstLayer the index in {@code target} of the range's first layer
     * @throws IllegalArgumentException when the range does not lie inside {@code target}'s layers
     */
    public static void joinInto(List<MultiLayerNetwork> shards, MultiLayerNetwork target, int firstLayer) {
        if (target.getLayers() == null) {
            target.init();
        }
        MultiLayerNetwork first = shards.getFirst();
        requireRange(firstLayer, first.getnLayers(), target.getnLayers());
        for (int l = 0; l < first.getnLayers(); l++) {
            int layer = l;
            ShardTransfer.joinLayer("layer " + (firstLayer + l), shards.stream().map(s -> s.getLayer(layer)).toList(),
                    target.getLayer(firstLayer + l));
        }
        List<ParameterUpdaterState> from = shards.stream().map(ParameterUpdaterState::of).toList();
        ParameterUpdaterState to = ParameterUpdaterState.of(target);
        for (int l = 0; l < first.getnLayers(); l++) {
            ShardTransfer.joinState("layer " + (firstLayer + l), String.valueOf(l), String.valueOf(firstLayer + l),
                    first.getLayer(l), from, to);
        }
    }

    private static void requireRange(int firstLayer, int layers, int networkLayers) {
        if (firstLayer < 0 || firstLayer + layers > networkLayers) {
            throw new IllegalArgumentException("layers [" + firstLayer + ", " + (firstLayer + layers) + ") of a network"
                    + " of " + networkLayers + " layers: expected a range inside it (fix: pass the index of the range's"
                    + " first layer in the unsharded network, and a range of its shard configuration)");
        }
    }

    /**
     * As {@link #gather(MultiLayerNetwork, Communicator, MultiLayerNetwork)} with every rank's shard in this process
     * (trainers whose tensor-parallel ranks are threads of one JVM): writes the whole network into {@code target},
     * the shards joined in rank order, the replicated layers from rank 0's shard, the updater state likewise, and rank
     * 0's counters. Not collective; bit for bit what {@code gather} writes.
     *
     * @param shards every rank's shard, in rank order ({@code shards.size()} is the tensor-parallel size)
     * @param target an unsharded network of the configuration the shards were made from
     * @throws IllegalArgumentException when {@code target}'s layers do not match the shards'
     */
    public static void join(List<MultiLayerNetwork> shards, MultiLayerNetwork target) {
        if (target.getLayers() == null) {
            target.init();
        }
        MultiLayerNetwork first = shards.getFirst();
        if (target.getnLayers() != first.getnLayers()) {
            throw new IllegalArgumentException("target has " + target.getnLayers() + " layers, the sharded network "
                    + first.getnLayers() + ": expected the unsharded configuration (fix: join into a"
                    + " network built from the configuration before TensorParallel sharded it)");
        }
        joinInto(shards, target, 0);
        target.setIterationCount(first.getIterationCount());
        target.setEpochCount(first.getEpochCount());
    }

    /**
     * This rank's share of DL4J's regularization score (L1, L2, weight decay) of the unsharded network: the terms of
     * the parameters this rank holds a block of on every rank, those of replicated parameters on rank 0 only, so that
     * the ranks' shares add up to the unsharded network's {@code calcRegularizationScore(true)} (to the rounding of the
     * sum's order). DL4J's own score of a shard counts the replicated terms on every rank.
     *
     * @param shard a network made by {@link #shard}, or a contiguous range of its layers
     * @param rank  the shard's rank in the tensor-parallel group
     * @return the share, 0 without regularization
     */
    public static double regularizationShare(MultiLayerNetwork shard, int rank) {
        double score = 0;
        for (Layer layer : shard.getLayers()) {
            if (!(layer.conf().getLayer() instanceof org.deeplearning4j.nn.conf.layers.BaseLayer conf)) {
                score += layer.calcRegularizationScore(true);
                continue;
            }
            for (java.util.Map.Entry<String, org.nd4j.linalg.api.ndarray.INDArray> p : layer.paramTable(true).entrySet()) {
                if (rank != 0 && ShardTransfer.splitAxis(layer, p.getKey()) < 0) {
                    continue; // replicated: counted once, on rank 0
                }
                List<org.nd4j.linalg.learning.regularization.Regularization> terms = conf.getRegularizationByParam(p.getKey());
                for (org.nd4j.linalg.learning.regularization.Regularization r : terms == null ? List.<org.nd4j.linalg
                        .learning.regularization.Regularization>of() : terms) {
                    score += r.score(p.getValue(), layer.getIterationCount(), layer.getEpochCount());
                }
            }
        }
        return score;
    }

    /**
     * Whether {@code network} holds tensor-parallel layers (was made by {@link #shard}).
     *
     * @param network any network
     * @return true when a layer is column- or row-parallel
     */
    public static boolean isSharded(MultiLayerNetwork network) {
        return network.getLayerWiseConfigurations().getConfs().stream()
                .anyMatch(c -> c.getLayer() instanceof TensorParallelDenseLayer || c.getLayer() instanceof VocabParallelOutputLayer
                        || c.getLayer() instanceof VocabParallelEmbeddingLayer);
    }

    /**
     * Whether {@code graph} holds tensor-parallel layers.
     *
     * @param graph any graph
     * @return true when a layer vertex is column- or row-parallel
     */
    public static boolean isSharded(ComputationGraph graph) {
        return graph.getConfiguration().getVertices().values().stream()
                .anyMatch(v -> v instanceof org.deeplearning4j.nn.conf.graph.LayerVertex l
                        && (l.getLayerConf().getLayer() instanceof TensorParallelDenseLayer
                        || l.getLayerConf().getLayer() instanceof VocabParallelOutputLayer
                        || l.getLayerConf().getLayer() instanceof VocabParallelEmbeddingLayer));
    }

    /**
     * Where a sharded network stands in its tensor-parallel group: the rank of the communicator it is attached to and
     * the group's size. Checkpoints keep each rank's shard apart by it ({@code tp-R-of-S}), and agree over the group
     * before a restore reads anything.
     *
     * @param rank  this rank in the tensor-parallel group
     * @param size  the group's size (the tensor-parallel degree)
     * @param group the tensor-parallel group (its communicator's)
     */
    public record Placement(int rank, int size, org.symmem4j.parallel.Group group) {
    }

    /**
     * The tensor-parallel group of {@code model}, or null when it is not tensor-parallel or not attached (callers
     * that need it attached refuse that themselves, as the wrapper's build() does).
     *
     * @param model a network
     * @return its tensor-parallel group, or null
     */
    public static org.symmem4j.parallel.Group groupOrNull(org.deeplearning4j.nn.api.Model model) {
        try {
            Placement p = placement(model);
            return p == null ? null : p.group();
        } catch (IllegalStateException notAttached) {
            return null;
        }
    }

    /**
     * This network's {@link Placement}, read from the communicator {@link #attach} bound to its layers.
     *
     * @param model a {@link MultiLayerNetwork} or {@link ComputationGraph}
     * @return its placement, or null when it holds no tensor-parallel layer
     * @throws IllegalStateException when it does but is not attached (no communicator tells its rank)
     */
    public static Placement placement(org.deeplearning4j.nn.api.Model model) {
        boolean sharded = model instanceof MultiLayerNetwork m && isSharded(m)
                || model instanceof ComputationGraph g && isSharded(g);
        if (!sharded) {
            return null;
        }
        Layer[] layers = model instanceof MultiLayerNetwork m ? m.getLayers() : ((ComputationGraph) model).getLayers();
        for (Layer layer : layers == null ? new Layer[0] : layers) {
            if (layer instanceof TensorParallelLayer tp && tp.comm() != null) {
                return new Placement(tp.comm().rank(), tp.comm().size(), tp.comm().group());
            }
        }
        throw new IllegalStateException("tensor-parallel network without a group: expected it attached to its"
                + " tensor-parallel communicator, found no layer attached, so its rank (which shard it holds) is unknown"
                + " (fix: call TensorParallel.attach(network, tpCommunicator) before building the trainer)");
    }

    /**
     * Gives every tensor-parallel layer of {@code copy} the group of the same layer of {@code original}:
     * for trainers that train a copy of the user's network on this rank (the data-parallel wrapper's
     * worker). Nothing happens for networks without tensor-parallel layers.
     *
     * @param original a network made by {@link #shard} and attached
     * @param copy     a network of the same configuration
     */
    public static void copyAttachments(MultiLayerNetwork original, MultiLayerNetwork copy) {
        for (int l = 0; l < original.getnLayers() && l < copy.getnLayers(); l++) {
            if (original.getLayer(l) instanceof TensorParallelLayer from && copy.getLayer(l) instanceof TensorParallelLayer to) {
                to.attach(from.comm());
            }
        }
    }

    /**
     * As {@link #copyAttachments(MultiLayerNetwork, MultiLayerNetwork)}, for graphs (layers matched by name).
     *
     * @param original a graph made by {@link #shard(ComputationGraph, int, int, String...)} and attached
     * @param copy     a graph of the same configuration
     */
    public static void copyAttachments(ComputationGraph original, ComputationGraph copy) {
        for (Layer layer : original.getLayers()) {
            if (layer instanceof TensorParallelLayer from
                    && copy.getLayer(layer.conf().getLayer().getLayerName()) instanceof TensorParallelLayer to) {
                to.attach(from.comm());
            }
        }
    }

    /**
     * Collective over the tensor-parallel group: writes the whole trained network into
     * {@code target} (a network with the unsharded configuration, e.g. the one given to {@link #shard})
     * on every rank: every shard gathered in rank order, the replicated layers from this rank, the updater
     * state likewise (so training resumed from {@code target} goes on as the unsharded network would), and the
     * counters. Save {@code target} with DL4J's {@code ModelSerializer} as any network (with its updater, to resume).
     *
     * @param network      this rank's sharded network, attached to {@code communicator}
     * @param communicator over the tensor-parallel group
     * @param target       an unsharded network of the configuration {@code network} was sharded from
     * @throws IllegalArgumentException when {@code target}'s layers do not match the sharded network's
     */
    public static void gather(MultiLayerNetwork network, Communicator communicator, MultiLayerNetwork target) {
        if (target.getLayers() == null) {
            target.init();
        }
        if (target.getnLayers() != network.getnLayers()) {
            throw new IllegalArgumentException("target has " + target.getnLayers() + " layers, the sharded network "
                    + network.getnLayers() + ": expected the unsharded configuration (fix: gather into a"
                    + " network built from the configuration before TensorParallel sharded it)");
        }
        ArrayCollectives comm = new ArrayCollectives(communicator);
        for (int l = 0; l < network.getnLayers(); l++) {
            ShardTransfer.gatherLayer("layer " + l, network.getLayer(l), target.getLayer(l), comm);
        }
        // every rank has an updater here (created fresh where the network never trained: its initial state), so every
        // rank makes the same all-gathers
        ParameterUpdaterState from = ParameterUpdaterState.of(network);
        ParameterUpdaterState to = ParameterUpdaterState.of(target);
        for (int l = 0; l < network.getnLayers(); l++) {
            ShardTransfer.gatherState("layer " + l, String.valueOf(l), network.getLayer(l), from, to, comm);
        }
        target.setIterationCount(network.getIterationCount());
        target.setEpochCount(network.getEpochCount());
    }

    /**
     * As {@link #gather(MultiLayerNetwork, Communicator, MultiLayerNetwork)}, for graphs (layers matched by name).
     *
     * @param graph        this rank's sharded graph, attached to {@code communicator}
     * @param communicator over the tensor-parallel group
     * @param target       an unsharded graph of the configuration {@code graph} was sharded from
     * @throws IllegalArgumentException when {@code target}'s layers do not match the sharded graph's
     */
    public static void gather(ComputationGraph graph, Communicator communicator, ComputationGraph target) {
        if (target.getLayers() == null) {
            target.init();
        }
        ArrayCollectives comm = new ArrayCollectives(communicator);
        for (Layer from : graph.getLayers()) {
            String name = from.conf().getLayer().getLayerName();
            Layer to = target.getLayer(name);
            if (to == null) {
                throw new IllegalArgumentException("target has no layer vertex '" + name + "': expected the"
                        + " unsharded configuration (fix: gather into a network built"
                        + " from the configuration before TensorParallel sharded it)");
            }
            ShardTransfer.gatherLayer("vertex '" + name + "'", from, to, comm);
        }
        ParameterUpdaterState fromState = ParameterUpdaterState.of(graph);
        ParameterUpdaterState toState = ParameterUpdaterState.of(target);
        for (Layer from : graph.getLayers()) {
            String name = from.conf().getLayer().getLayerName();
            ShardTransfer.gatherState("vertex '" + name + "'", name, from, fromState, toState, comm);
        }
        target.getConfiguration().setIterationCount(graph.getIterationCount());
        target.getConfiguration().setEpochCount(graph.getEpochCount());
    }

}
