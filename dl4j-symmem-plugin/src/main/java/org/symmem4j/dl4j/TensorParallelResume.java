package org.symmem4j.dl4j;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.tensor.TensorParallelReslice;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.dl4j.train.CheckpointLayout;

/**
 * A wrapper's restore of a checkpoint of another tensor-parallel degree (a {@code dp x tp = A x T} run's, resumed on
 * {@code B x U}): every tp rank's shard of that step is read whole with its full updater state (a plain or ZeRO-1/2
 * checkpoint's {@code model.zip}; a ZeRO stage 3 checkpoint's parameter and state shards of its dp ranks, assembled
 * into a network of the old degree's shape by {@link FullyShardedCheckpoints#readWhole}), the shards are re-sliced onto this rank's shard of degree U
 * ({@link TensorParallelReslice}: each tensor-parallel layer's weights, biases and updater state cut along their split
 * axis anew), and the result is restored as a model-only checkpoint would be: into the model and replicas, and with
 * ZeRO stages 1 and 2 cut into this wrapper's dp shards ({@link ShardedCheckpoints#cutFromModel}). Every file is
 * verified against its manifest and everything checked (equal counters in every shard, layers, divisibility) before
 * anything is written, and every rank of the trainer agrees on the outcome first ({@link CheckpointLayout#agree}).
 * With ZeRO stage 3 each worker takes its blocks of the re-sliced shard ({@link FullyShardedCheckpoints#copyFromModel}).
 */
final class TensorParallelResume {

    private static final Logger LOG = LoggerFactory.getLogger(TensorParallelResume.class);

    private TensorParallelResume() {
    }

    /**
     * Restores {@code dirs} (every rank's directory of one step of degree {@code dirs.size()}, rank order) onto this
     * rank's shard. Collective as {@link WrapperCheckpoints#restore}; workers started and idle.
     *
     * @return the checkpoint's counters
     */
    static CheckpointDirectory.Counters restore(List<Path> dirs, CheckpointLayout layout, DataParallelSettings settings,
                                                DataParallelWorkers workers, ModelReplica model) throws IOException {
        ModelReplica resliced = null;
        CheckpointDirectory.Counters counters = null;
        Exception failure = null;
        try {
            counters = verify(dirs);
            resliced = reslice(dirs, layout, model);
        } catch (IOException | IllegalArgumentException e) {
            failure = e;
        }
        // every rank (each tp rank of each replica) refuses if one's re-slicing does not fit, before any writes
        layout.agree("checkpoint restore", failure, settings.group());
        if (settings.sharding() == null) {
            model.copyStateFrom(resliced); // the workers take it at the next fit
        } else if (settings.sharding() == ZeroStage.PARAMETERS) {
            // each worker its blocks of the re-sliced shard, as from a consolidated checkpoint's model.zip
            FullyShardedCheckpoints.copyFromModel(dirs.getFirst(), resliced, workers.all(), WrapperCheckpoints.WORDS);
            workers.pullModelFromReplicas();
        } else {
            ShardedCheckpoints.cutFromModel(dirs.getFirst(), resliced, workers.shards(), WrapperCheckpoints.WORDS,
                    counters);
            model.copyParamsAndCountersFrom(resliced);
            for (ModelReplica replica : workers.replicas()) {
                replica.copyParamsAndCountersFrom(model);
            }
            workers.pullModelFromReplicas();
        }
        LOG.info("symmem4j checkpoint: re-sliced tensor-parallel degree {}'s checkpoint {} at step={} onto tensor-parallel"
                + " rank {} of {}", dirs.size(), dirs.getFirst(), counters.step(), layout.rank(), layout.size());
        return counters;
    }

    /** Every rank's directory complete and of the same step, each its own rank's shard; the counters. */
    private static CheckpointDirectory.Counters verify(List<Path> dirs) throws IOException {
        CheckpointDirectory.Counters first = null;
        for (int r = 0; r < dirs.size(); r++) {
            Path dir = dirs.get(r);
            CheckpointDirectory.Counters c = CheckpointDirectory.verify(dir); // torn: TornCheckpointException
            String marker = Files.readString(dir.resolve(CheckpointLayout.MARKER), StandardCharsets.ISO_8859_1);
            String expected = "rank=" + r + "\nsize=" + dirs.size() + "\n";
            if (!marker.equals(expected)) {
                throw new IllegalArgumentException("checkpoint " + dir + "'s " + CheckpointLayout.MARKER + " says "
                        + marker.strip().replace('\n', ' ') + ": expected " + expected.strip().replace('\n', ' ')
                        + " (another rank's shard in its directory; fix: restore an earlier, intact checkpoint)");
            }
            if (!Files.isRegularFile(dir.resolve(ShardCheckpoint.MODEL_FILE))
                    && !FullyShardedCheckpoints.hasParameterShards(dir)) {
                throw new IllegalArgumentException("checkpoint " + dir + " has neither " + ShardCheckpoint.MODEL_FILE
                        + " nor ZeRO stage 3's parameter shards: expected a tensor-parallel rank's whole shard in one of"
                        + " them (fix: restore an earlier, complete checkpoint)");
            }
            if (first == null) {
                first = c;
            } else if (c.step() != first.step() || c.iteration() != first.iteration() || c.epoch() != first.epoch()
                    || c.batchesInEpoch() != first.batchesInEpoch()) {
                throw new IllegalArgumentException("checkpoint " + dir + " is at " + c + ", " + dirs.getFirst() + " at "
                        + first + ": expected every tensor-parallel rank's shard of one step (files from different saves;"
                        + " fix: resumeFrom the run's root, which takes the newest step complete on every rank)");
            }
        }
        return first;
    }

    /**
     * Every old rank's shard read whole ({@code model.zip}, or a stage-3 checkpoint's shards assembled) and re-sliced
     * into a fresh copy of this rank's network; nothing else written.
     */
    private static ModelReplica reslice(List<Path> dirs, CheckpointLayout layout, ModelReplica model)
            throws IOException {
        ModelReplica target = model.blankCopy();
        int degree = dirs.size();
        if (target.model() instanceof MultiLayerNetwork net) {
            List<MultiLayerNetwork> shards = new ArrayList<>();
            for (Path dir : dirs) {
                if (FullyShardedCheckpoints.hasParameterShards(dir)) {
                    MultiLayerNetwork old = new MultiLayerNetwork(TensorParallelReslice.configurationFor(
                            net.getLayerWiseConfigurations(), degree));
                    old.init();
                    shards.add((MultiLayerNetwork) assembled(dir, old));
                } else {
                    shards.add(ModelSerializer.restoreMultiLayerNetwork(modelFile(dir), true));
                }
            }
            TensorParallelReslice.reslice(shards, net, layout.rank(), layout.size());
        } else {
            ComputationGraph graph = (ComputationGraph) target.model();
            List<ComputationGraph> shards = new ArrayList<>();
            for (Path dir : dirs) {
                if (FullyShardedCheckpoints.hasParameterShards(dir)) {
                    ComputationGraph old = new ComputationGraph(TensorParallelReslice.configurationFor(
                            graph.getConfiguration(), degree));
                    old.init();
                    shards.add((ComputationGraph) assembled(dir, old));
                } else {
                    shards.add(ModelSerializer.restoreComputationGraph(modelFile(dir), true));
                }
            }
            TensorParallelReslice.reslice(shards, graph, layout.rank(), layout.size());
        }
        return target;
    }

    /** A stage-3 checkpoint's dp shards assembled into {@code old}, a network of the old degree's shard shape. */
    private static org.deeplearning4j.nn.api.Model assembled(Path dir, org.deeplearning4j.nn.api.Model old)
            throws IOException {
        ModelReplica whole = ModelReplica.of(old);
        if (old instanceof MultiLayerNetwork n) {
            n.initGradientsView();
        } else {
            ((ComputationGraph) old).initGradientsView();
        }
        FullyShardedCheckpoints.readWhole(dir, whole, WrapperCheckpoints.WORDS);
        return old;
    }

    private static File modelFile(Path dir) {
        return dir.resolve(ShardCheckpoint.MODEL_FILE).toFile();
    }
}
