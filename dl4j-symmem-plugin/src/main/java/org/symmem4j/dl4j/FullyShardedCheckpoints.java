package org.symmem4j.dl4j;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.zip.CRC32;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.dl4j.train.CheckpointDirectory;

/**
 * Checkpoints of ZeRO stage 3 ({@link ZeroStage#PARAMETERS}): each rank writes only what it owns, and no rank ever
 * holds the whole parameter vector for a save or a restore, also when the model was started from a configuration
 * and is hollow ({@link ConfigurationStart}).
 *
 * <p>A stage-3 checkpoint directory holds, per rank r of N, two files of {@link ShardCheckpoint}'s format, written by
 * {@link ShardedCheckpoints#save} (temporary name, forced, renamed; the manifest with every file's size and CRC-32C
 * last, so a directory without it, or whose files do not match it, is torn and refused):
 * <ul>
 *   <li>{@code shard-r-of-N.bin}: the rank's updater state, stage {@code PARAMETERS}; its parameter ranges are the
 *       rank's blocks of every unit ({@link FullySharded}: block r of each layer's parameters), its state ranges
 *       where their state lies in DL4J's flat updater-state view ({@link UpdaterLayout#stateRanges(long[])});</li>
 *   <li>{@code params-r-of-N.bin}: the same blocks' parameters, its state ranges elements of the flat parameter
 *       vector.</li>
 * </ul>
 * No {@code model.zip}: {@link #saveModel} writes the consolidated model on request. Both kinds of file describe
 * their contents by global flat ranges, and the cut is a pure function of the flat layout, so a checkpoint of N ranks
 * restores onto M: each new rank lists its blocks and reads each element from the one file that holds it (positional
 * reads of the byte ranges it needs, nothing else). A restore reads into arrays of the rank's own size and moves them
 * into the shards only when every rank has read and checked everything, so a refused restore changes nothing. A
 * stage-3 wrapper also restores a consolidated checkpoint (plain data parallelism's, stages 1 and 2's: their
 * {@code model.zip}), each rank taking its blocks and its state from the whole model.
 *
 * <p>Hybrid sharding ({@link HybridSharding}, N workers in N / S replicas of S) writes the same format: the replicas
 * hold the same blocks bit for bit, so only the first replica's S ranks write, each as rank s of S (its place in its
 * shard group), and the checkpoint is a stage-3 checkpoint of S ranks (its manifest says {@code ranks=S}). A restore
 * cuts by the restoring run's own blocks: every rank of every replica reads the blocks of its shard rank, so an HSDP
 * run restores a stage-3 checkpoint of any rank count, an HSDP checkpoint of any N'/S', and stage 3 over every worker
 * restores an HSDP checkpoint.
 */
final class FullyShardedCheckpoints {

    private static final String STAGE = ZeroStage.PARAMETERS.name();

    private FullyShardedCheckpoints() {
    }

    /**
     * Writes this process's ranks' shards into {@code dir}; collective in group mode (every rank, same directory,
     * also the ranks that write nothing: hybrid sharding's replicas after the first). Workers started and idle.
     *
     * @param counters where the checkpoint stands; its rank count is replaced by the ranks that write (S under hybrid
     *                 sharding)
     */
    static void save(Path dir, DataParallelSettings settings, List<DataParallelWorker> workers,
                     CheckpointDirectory.Counters counters, ShardedCheckpoints.Agreement agreement) throws IOException {
        List<ShardedCheckpoints.Shard> states = new ArrayList<>();
        List<ShardedCheckpoints.Shard> params = new ArrayList<>();
        int ranks = workers.getFirst().fullySharded().shardCount();
        for (DataParallelWorker w : workers) {
            if (!w.fullySharded().firstReplica()) {
                continue; // hybrid sharding: the first replica's blocks are these, bit for bit
            }
            int rank = w.fullySharded().shardRank();
            states.add(stateShard(rank, w, w.sharded().state()));
            INDArray blocks = blocksArray(w);
            if (blocks != null) {
                copyBlocks(w, blocks, true);
            }
            params.add(paramShard(rank, w, blocks));
        }
        boolean leader = settings.group() == null || settings.group().rank() == 0; // rank 0: the first replica's
        CheckpointDirectory.Counters written = new CheckpointDirectory.Counters(counters.step(), counters.epoch(),
                counters.iteration(), counters.batchesInEpoch(), counters.examplesInEpoch(), ranks);
        ShardedCheckpoints.save(dir, ranks, states, params, leader, null, written, agreement);
    }

    /**
     * Restores {@code dir} into this process's workers' shards: a stage-3 checkpoint of any rank count (hybrid
     * sharding's included), or a consolidated one ({@code model.zip} without parameter shards); with hybrid sharding
     * every replica reads its shard rank's blocks. Collective in group mode; on any rank's refusal
     * every rank throws with its shards unchanged. Workers started and idle; the caller then pulls the model from
     * the replicas.
     *
     * @return the manifest's counters, or null for a consolidated checkpoint without a manifest
     */
    static CheckpointDirectory.Counters restore(Path dir, List<DataParallelWorker> workers, ModelReplica model, ShardedCheckpoints.Words words,
                                                ShardedCheckpoints.Agreement agreement) throws IOException {
        if (!hasParameterShards(dir) && Files.isRegularFile(dir.resolve(ShardCheckpoint.MODEL_FILE))) {
            ShardedCheckpoints.Restored restored = ShardedCheckpoints.restoreModel(dir, model.model(), words, agreement);
            copyFromModel(dir, ModelReplica.of(restored.model()), workers, words);
            return restored.counters();
        }
        // read into arrays of the rank's own size; the shards take them once every rank has checked everything
        List<ShardedCheckpoints.Shard> states = new ArrayList<>();
        List<ShardedCheckpoints.Shard> params = new ArrayList<>();
        for (DataParallelWorker w : workers) {
            int rank = w.fullySharded().shardRank();
            INDArray state = w.sharded().state();
            states.add(stateShard(rank, w, state == null ? null : Nd4j.create(state.dataType(), state.length())));
            params.add(paramShard(rank, w, blocksArray(w)));
        }
        return restoreShards(dir, workers, model, words, agreement, states, params);
    }

    /**
     * Each worker takes its blocks of {@code saved}'s parameters and updater state (a consolidated checkpoint's
     * {@code model.zip}, or a tensor-parallel shard re-sliced from another degree's checkpoint) and its counters. Not
     * collective: the caller agreed with the other ranks before.
     *
     * @param dir   the checkpoint, for messages
     * @param saved the whole model (this rank's network), with its updater state
     * @throws IllegalArgumentException when its updater state is not this wrapper's size
     */
    static void copyFromModel(Path dir, ModelReplica saved, List<DataParallelWorker> workers,
                              ShardedCheckpoints.Words words) {
        long stateCount = workers.getFirst().sharded().layout().stateCount();
        INDArray full = saved.updaterState();
        if (workers.getFirst().sharded().state() != null && (full == null || full.length() != stateCount)) {
            throw new IllegalArgumentException(dir.resolve(ShardCheckpoint.MODEL_FILE) + " holds "
                    + (full == null ? "no" : full.length()) + " updater-state elements; this " + words.trainer()
                    + "'s model " + stateCount + " (fix: restore a model saved with its updater state, of the network"
                    + " configuration this " + words.trainer() + " was built on)");
        }
        for (DataParallelWorker w : workers) {
            w.fullySharded().copyOwnBlocksFrom(saved.params());
            if (w.sharded().state() != null) {
                w.sharded().importState(full);
            }
            w.replica().setIterationCount(saved.iterationCount());
            w.replica().setEpochCount(saved.epochCount());
        }
    }

    /**
     * Reads a stage-3 checkpoint of any rank count whole into {@code whole}: its parameters, its full updater state
     * and its counters, as {@link #restore} re-shards N ranks onto M, here onto one rank that owns every block (the
     * same checks, plan and positional reads). For re-slicing a tensor-parallel shard onto another degree
     * ({@code TensorParallelResume}). Not collective: the caller agrees with the other ranks after.
     *
     * @param dir   a stage-3 checkpoint directory (verified against its manifest here)
     * @param whole a network of the configuration that wrote it, initialised with its gradient view (not hollow);
     *              its parameters, updater state and counters are overwritten
     * @return the manifest's counters
     * @throws IOException              when a file cannot be read or the checkpoint is torn
     * @throws IllegalArgumentException when the checkpoint does not fit {@code whole} (named)
     */
    static CheckpointDirectory.Counters readWhole(Path dir, ModelReplica whole, ShardedCheckpoints.Words words)
            throws IOException {
        INDArray params = whole.params();
        long count = params.length();
        UpdaterLayout layout = UpdaterLayout.of(whole.dl4jUpdater(), count);
        List<ShardedCheckpoints.Range> all = List.of(new ShardedCheckpoints.Range(0, count));
        INDArray state = whole.updaterState();
        ShardedCheckpoints.Shard states = new ShardedCheckpoints.Shard(0, STAGE, params.dataType(), count, all,
                layout.stateCount(), state == null ? List.of() : layout.stateRanges(0, count), layout.fingerprint(),
                whole.iterationCount(), whole.epochCount(), state);
        ShardedCheckpoints.Shard blocks = new ShardedCheckpoints.Shard(0, STAGE, params.dataType(), count, all, count,
                all, unitsFingerprint(whole), whole.iterationCount(), whole.epochCount(), params);
        ShardedCheckpoints.Reads reads = new ShardedCheckpoints.Reads(Set.of(STAGE),
                "ZeRO stage-3 shards (PARAMETERS: parameter and updater-state shards)",
                r -> layout.stateRanges(r.start(), r.end()), false, false);
        CheckpointDirectory.Counters c = ShardedCheckpoints.restore(dir, 1, List.of(states), List.of(blocks),
                whole.model(), words, reads, (tag, failure) -> {
                }).counters();
        whole.setIterationCount(c.iteration());
        whole.setEpochCount(c.epoch());
        return c;
    }

    /** {@link #restore} of a stage-3 checkpoint's shards into {@code states} and {@code params}, then the workers'. */
    private static CheckpointDirectory.Counters restoreShards(Path dir, List<DataParallelWorker> workers,
                                                              ModelReplica model, ShardedCheckpoints.Words words,
                                                              ShardedCheckpoints.Agreement agreement,
                                                              List<ShardedCheckpoints.Shard> states,
                                                              List<ShardedCheckpoints.Shard> params) throws IOException {
        UpdaterLayout layout = workers.getFirst().sharded().layout();
        ShardedCheckpoints.Reads reads = new ShardedCheckpoints.Reads(Set.of(STAGE),
                "ZeRO stage-3 shards (PARAMETERS: parameter and updater-state shards)",
                r -> layout.stateRanges(r.start(), r.end()), false, false);
        ShardedCheckpoints.Restored restored = ShardedCheckpoints.restore(dir,
                workers.getFirst().fullySharded().shardCount(), states, params, model.model(), words, reads, agreement);
        CheckpointDirectory.Counters c = restored.counters();
        for (int j = 0; j < workers.size(); j++) {
            DataParallelWorker w = workers.get(j);
            if (states.get(j).state() != null) {
                INDArray read = states.get(j).state();
                MemorySegment.copy(ModelReplica.segmentOf(read), 0, ModelReplica.segmentOf(w.sharded().state()), 0,
                        read.length() * read.dataType().width());
            }
            if (params.get(j).state() != null) {
                copyBlocks(w, params.get(j).state(), false);
            }
            w.replica().setIterationCount(c.iteration());
            w.replica().setEpochCount(c.epoch());
        }
        return c;
    }

    /**
     * Writes the whole model with its full updater state as a {@code ModelSerializer} file, from the process that
     * runs rank 0, through a temporary file and a rename; in group mode collective (every rank gathers the model,
     * unit by unit, and the state). With stage 3 from a configuration the whole model is built for this call only:
     * DL4J's network of the configuration over the gathered parameters. Workers started and idle.
     */
    static void saveModel(Path file, DataParallelSettings settings, DataParallelWorkers workers, ModelReplica model,
                          ShardedCheckpoints.Agreement agreement) throws IOException {
        boolean leader = settings.group() == null || settings.group().rank() == 0;
        org.deeplearning4j.nn.api.Model whole;
        if (ConfigurationStart.isHollow(model)) {
            List<FullySharded> shards = workers.all().stream().map(DataParallelWorker::fullySharded).toList();
            INDArray full = ConfigurationStart.gather(model, shards, settings.group() != null);
            org.deeplearning4j.nn.api.Model net;
            if (model.model() instanceof GraphConfigurationStart.Graph g) {
                net = GraphConfigurationStart.wholeOver(g, full);
            } else {
                MultiLayerNetwork mln = new MultiLayerNetwork(
                        ((MultiLayerNetwork) model.model()).getLayerWiseConfigurations().clone());
                mln.init(full, false);
                net = mln;
            }
            ModelReplica replica = ModelReplica.of(net);
            INDArray state = replica.updaterState();
            if (state != null && settings.group() != null) {
                workers.all().getFirst().sharded().gatherFullState(state);
            } else if (state != null) {
                for (DataParallelWorker w : workers.all()) {
                    w.sharded().exportState(state);
                }
            }
            ModelReplica first = workers.all().getFirst().replica();
            replica.setIterationCount(first.iterationCount());
            replica.setEpochCount(first.epochCount());
            whole = net;
        } else {
            workers.pullModelFromReplicas();
            whole = model.model();
        }
        Throwable failure = null;
        if (leader) {
            try {
                if (file.getParent() != null) {
                    Files.createDirectories(file.getParent());
                }
                CheckpointDirectory.writeAtomically(file, tmp -> ModelSerializer.writeModel(whole, tmp.toFile(), true));
            } catch (IOException | RuntimeException e) {
                failure = e;
            }
        }
        agreement.failTogether("model-saved", failure);
        if (failure instanceof IOException io) {
            throw io;
        } else if (failure != null) {
            throw (RuntimeException) failure;
        }
    }

    /** Whether {@code dir} holds stage-3 parameter shard files. */
    static boolean hasParameterShards(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) {
            return false;
        }
        try (var listing = Files.list(dir)) {
            return listing.anyMatch(f -> ShardCheckpoint.worldSizeOf(f, true) >= 0);
        }
    }

    /** The worker's updater-state shard as a checkpoint describes it, over {@code state} (its own, or a scratch copy). */
    private static ShardedCheckpoints.Shard stateShard(int rank, DataParallelWorker w, INDArray state) {
        ShardedUpdater s = w.sharded();
        ModelReplica r = w.replica();
        long[] own = s.ranges();
        return new ShardedCheckpoints.Shard(rank, STAGE, r.params().dataType(), s.layout().paramCount(), ranges(own),
                s.layout().stateCount(), s.layout().stateRanges(own), s.layout().fingerprint(), r.iterationCount(),
                r.epochCount(), state);
    }

    /** The worker's parameter blocks as a checkpoint describes them: state space the flat parameter vector. */
    private static ShardedCheckpoints.Shard paramShard(int rank, DataParallelWorker w, INDArray blocks) {
        ModelReplica r = w.replica();
        List<ShardedCheckpoints.Range> own = ranges(w.fullySharded().ownRanges());
        long count = r.params().length();
        return new ShardedCheckpoints.Shard(rank, STAGE, r.params().dataType(), count, own, count, own,
                unitsFingerprint(w.fullySharded()), r.iterationCount(), r.epochCount(), blocks);
    }

    /** A contiguous array of the worker's own blocks' size, or null when it owns none. */
    private static INDArray blocksArray(DataParallelWorker w) {
        long n = ShardedCheckpoints.Range.total(ranges(w.fullySharded().ownRanges()));
        return n == 0 ? null : Nd4j.create(w.replica().params().dataType(), n);
    }

    /** Copies the worker's own blocks into {@code blocks}, one after another ({@code out}), or back. */
    private static void copyBlocks(DataParallelWorker w, INDArray blocks, boolean out) {
        MemorySegment params = ModelReplica.segmentOf(w.replica().params());
        MemorySegment flat = ModelReplica.segmentOf(blocks);
        long width = blocks.dataType().width();
        long at = 0;
        for (ShardedCheckpoints.Range r : ranges(w.fullySharded().ownRanges())) {
            long bytes = r.length() * width;
            if (out) {
                MemorySegment.copy(params, r.start() * width, flat, at, bytes);
            } else {
                MemorySegment.copy(flat, at, params, r.start() * width, bytes);
            }
            at += bytes;
        }
    }

    /** [from, to) pairs as ranges, the empty ones left out. */
    private static List<ShardedCheckpoints.Range> ranges(long[] pairs) {
        List<ShardedCheckpoints.Range> out = new ArrayList<>();
        for (int i = 0; i < pairs.length; i += 2) {
            if (pairs[i] < pairs[i + 1]) {
                out.add(new ShardedCheckpoints.Range(pairs[i], pairs[i + 1]));
            }
        }
        return out;
    }

    /**
     * The units' layout (each layer's elements of the flat vector), which decides how any rank count cuts the
     * parameters: equal for the same network configuration, whatever the rank count.
     */
    static long unitsFingerprint(FullySharded fs) {
        return unitsFingerprint(fs.units().stream()
                .map(u -> new ShardedCheckpoints.Range(u.offset(), u.offset() + u.length())).toList());
    }

    /** {@link #unitsFingerprint(FullySharded)} of a whole network: its layers' parts of the flat vector, by offset. */
    private static long unitsFingerprint(ModelReplica whole) {
        return unitsFingerprint(whole.layerSlices().stream().map(l -> new ShardedCheckpoints.Range(l.start(), l.end()))
                .sorted(java.util.Comparator.comparingLong(ShardedCheckpoints.Range::start)).toList());
    }

    private static long unitsFingerprint(List<ShardedCheckpoints.Range> units) {
        StringBuilder b = new StringBuilder("units");
        for (ShardedCheckpoints.Range u : units) {
            b.append(';').append(u.start()).append('+').append(u.length());
        }
        CRC32 crc = new CRC32();
        crc.update(b.toString().getBytes(StandardCharsets.UTF_8));
        return crc.getValue();
    }
}
