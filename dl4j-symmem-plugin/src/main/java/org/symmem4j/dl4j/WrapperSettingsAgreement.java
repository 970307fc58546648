package org.symmem4j.dl4j;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.zip.CRC32C;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.dl4j.train.CheckpointSchedule;
import org.symmem4j.parallel.Invariants;

/**
 * What every rank of a group-mode wrapper must have alike, described at {@code build()} and compared over every rank
 * of the trainer (every tp rank of every data-parallel replica), in the same all-gather that agrees on the ranks'
 * refusals ({@link org.symmem4j.dl4j.train.CheckpointLayout#agreeOnBuild}). Ranks built with different settings would
 * otherwise run different collectives (and wait for each other until their timeout) or the same ones over different
 * data (and train garbage, silently); now every rank throws one error naming each setting that differs and each rank's
 * value, before anything is allocated, read or written.
 *
 * <p>Compared over every rank: {@code sharding}, {@code shardGroupSize}, {@code overlapSyncWithBackprop},
 * {@code gradientAccumulation}, {@code gradientTransfer}, {@code bucketBytes}, {@code minBucketBytes}, the algorithm
 * ({@code algorithm}: forced, a custom policy, or the calibrated one), {@code nonFiniteGradients},
 * {@code onWorkerFailure}, {@code minWorkers}, {@code syncBatchNorm}, the checkpoint schedule ({@code checkpointEvery}
 * and {@code keepCheckpoints}, not the root), whether the build resumes ({@code resumeFrom}, not the root) and the
 * tensor-parallel degree. Compared among the replicas of each tensor-parallel rank (the tp ranks' shards differ by
 * design): the model's kind, a CRC-32C of its configuration's JSON (without the iteration and epoch counts), its
 * parameter count and data type, and its iteration and epoch counts.
 *
 * <p>Not compared, as they may differ per rank without changing what the ranks compute together: the iterator given to
 * {@code fit}, listeners and step listeners, meters, ND4J threads ({@code ompThreadsPerWorker}), {@code prefetchBuffer},
 * {@code workspaceMode} (results are the same either way), {@code reportScoreAfterAveraging} (a log line), the timeout
 * (the group's), the checkpoint and resume roots (paths each rank may mount elsewhere; what they hold is agreed when
 * read). Nor the initial parameter values: a resume replaces them, and without one the same configuration from the
 * same seed gives the same.
 */
final class WrapperSettingsAgreement {

    /** Compared among the replicas of one tensor-parallel rank only: each tp rank holds its own shard network. */
    private static final Set<String> PER_SHARD = Set.of("model", "configuration", "parameters", "dataType",
            "iterationCount", "epochCount");
    private static final Set<String> STATE = Set.of("iterationCount", "epochCount");

    private WrapperSettingsAgreement() {
    }

    /**
     * This rank's settings as {@code key=value} lines, in a fixed order: what {@link #requireSame} compares.
     *
     * @param b        the builder, its checks passed (the model initialised, or hollow for stage 3)
     * @param schedule the periodic checkpoints, or null
     * @param resumes  whether {@code build()} resumes from a checkpoint root
     */
    static String describe(DataParallelBuilder b, CheckpointSchedule schedule, boolean resumes) {
        Map<String, String> s = new LinkedHashMap<>();
        s.put("sharding", b.sharding == null ? "none" : b.sharding.name());
        s.put("shardGroupSize", b.shardGroupSize == 0 ? "every worker" : Integer.toString(b.shardGroupSize));
        s.put("overlapSyncWithBackprop", Boolean.toString(b.overlap));
        s.put("gradientAccumulation", Integer.toString(b.accumulation));
        s.put("gradientTransfer", b.gradientTransfer.name());
        s.put("bucketBytes", Long.toString(b.bucketBytes));
        s.put("minBucketBytes", Long.toString(b.minBucketBytes));
        s.put("algorithm", b.algorithm != null ? b.algorithm.name() + " (forced)"
                : b.policy != null ? "a custom AlgorithmPolicy" : "the calibrated policy");
        s.put("nonFiniteGradients", b.nonFiniteGradients.name());
        s.put("onWorkerFailure", b.onWorkerFailure.name());
        s.put("minWorkers", Integer.toString(b.minWorkers));
        s.put("syncBatchNorm", Boolean.toString(b.syncBatchNorm));
        s.put("checkpointEvery", schedule == null ? "none" : schedule.describe());
        s.put("resumeFrom", resumes ? "a root" : "none");
        TensorParallel.Placement tp = TensorParallel.placement(b.model.model()); // attached: check() refused otherwise
        s.put("tensorParallel", tp == null ? "none" : "degree " + tp.size());
        describeModel(b.model.model(), s);
        StringBuilder text = new StringBuilder();
        s.forEach((k, v) -> text.append(k).append('=').append(v).append('\n'));
        return text.toString();
    }

    /** The model's kind, configuration, parameter count, data type and counters; counted from the configuration. */
    private static void describeModel(org.deeplearning4j.nn.api.Model model, Map<String, String> s) {
        String json;
        long parameters;
        String dataType;
        long iterations;
        long epochs;
        if (model instanceof MultiLayerNetwork m) {
            MultiLayerConfiguration conf = m.getLayerWiseConfigurations().clone();
            iterations = conf.getIterationCount();
            epochs = conf.getEpochCount();
            conf.setIterationCount(0); // compared apart, as what they are
            conf.setEpochCount(0);
            json = conf.toJson();
            parameters = HollowNetworks.parameterCount(conf);
            dataType = String.valueOf(conf.getDataType());
            s.put("model", "MultiLayerNetwork");
        } else if (model instanceof ComputationGraph g) {
            ComputationGraphConfiguration conf = g.getConfiguration().clone();
            iterations = conf.getIterationCount();
            epochs = conf.getEpochCount();
            conf.setIterationCount(0);
            conf.setEpochCount(0);
            json = conf.toJson();
            parameters = HollowNetworks.parameterCount(conf);
            dataType = String.valueOf(conf.getDataType());
            s.put("model", "ComputationGraph");
        } else {
            throw Invariants.violated("a wrapper's model of " + model.getClass() + ": ModelReplica.of takes networks"
                    + " and graphs only");
        }
        CRC32C crc = new CRC32C();
        crc.update(json.getBytes(StandardCharsets.UTF_8));
        s.put("configuration", "CRC-32C " + Long.toHexString(crc.getValue()) + " of its JSON");
        s.put("parameters", Long.toString(parameters));
        s.put("dataType", dataType);
        s.put("iterationCount", Long.toString(iterations));
        s.put("epochCount", Long.toString(epochs));
    }

    /**
     * Throws on every rank (each has the same {@code descriptions}) when the ranks' settings differ: each setting that
     * differs, with the ranks grouped by their value, and the fix.
     *
     * @param descriptions every rank's {@link #describe}, replica by replica, each replica's in tp rank order
     * @throws IllegalArgumentException when a setting differs
     */
    static void requireSame(List<List<String>> descriptions) {
        int replicas = descriptions.size();
        int tpRanks = descriptions.getFirst().size();
        List<List<Map<String, String>>> grid = new ArrayList<>();
        Set<String> keys = new LinkedHashSet<>();
        for (List<String> replica : descriptions) {
            List<Map<String, String>> row = new ArrayList<>();
            for (String text : replica) {
                Map<String, String> settings = parse(text);
                keys.addAll(settings.keySet());
                row.add(settings);
            }
            grid.add(row);
        }
        List<String> differences = new ArrayList<>();
        Set<String> fixes = new LinkedHashSet<>();
        for (String key : keys) {
            boolean perShard = PER_SHARD.contains(key);
            for (int t = 0; t < (perShard ? tpRanks : 1); t++) {
                Map<String, List<String>> ranksByValue = new LinkedHashMap<>();
                for (int d = 0; d < replicas; d++) {
                    for (int u = 0; u < tpRanks; u++) {
                        if (!perShard || u == t) {
                            ranksByValue.computeIfAbsent(grid.get(d).get(u).getOrDefault(key, "(not described)"),
                                    v -> new ArrayList<>()).add(id(d, u, replicas, tpRanks));
                        }
                    }
                }
                if (ranksByValue.size() > 1) {
                    StringBuilder line = new StringBuilder(key + (perShard && tpRanks > 1 ? " of tp rank " + t
                            + "'s shard" : "") + " differs:");
                    ranksByValue.forEach((value, ranks) -> line.append(' ').append(value).append(" on ")
                            .append(label(replicas, tpRanks)).append("(s) ").append(ranks).append(','));
                    line.setLength(line.length() - 1);
                    differences.add(line.toString());
                    fixes.add(fixFor(key, tpRanks > 1));
                }
            }
        }
        if (differences.isEmpty()) {
            return;
        }
        int ranks = replicas * tpRanks;
        throw new IllegalArgumentException("build() refused on every rank (" + ranks
                + (replicas > 1 && tpRanks > 1 ? " = dp " + replicas + " x tp " + tpRanks : "") + "): the ranks were"
                + " built with different settings, expected every rank's the same (its sharding, averaging, checkpoints,"
                + " failure handling and model); nothing was read into or written from any rank's model. "
                + String.join("; ", differences) + " (fix: " + String.join("; ", fixes) + ")");
    }

    private static String fixFor(String key, boolean tensorParallel) {
        if (STATE.contains(key)) {
            return "start every rank from the same state: the same fresh network, or the same checkpoint (resumeFrom)";
        }
        if (PER_SHARD.contains(key)) {
            return "build every rank's network from the same configuration (the same code and seed, or the same file)"
                    + (tensorParallel ? ", each tp rank's shard with TensorParallel.shard of that network for its tp"
                    + " rank" : "");
        }
        if (key.equals("tensorParallel")) {
            return "shard every rank's network for the same tensor-parallel degree, and attach it to its tp group";
        }
        return "give every rank's SymmemParallelWrapper.builder the same settings, e.g. from one configuration shared"
                + " by the ranks' program";
    }

    /** A rank's name in messages, as the refusal agreement names it. */
    private static String id(int d, int t, int replicas, int tpRanks) {
        return replicas > 1 && tpRanks > 1 ? "dp " + d + " tp " + t : Integer.toString(tpRanks > 1 ? t : d);
    }

    private static String label(int replicas, int tpRanks) {
        return replicas == 1 && tpRanks > 1 ? "tp rank" : "rank";
    }

    private static Map<String, String> parse(String text) {
        Map<String, String> settings = new LinkedHashMap<>();
        for (String line : text.split("\n")) {
            int eq = line.indexOf('=');
            if (eq > 0) {
                settings.put(line.substring(0, eq), line.substring(eq + 1));
            }
        }
        return settings;
    }
}
