package org.symmem4j.dl4j;

import java.io.File;
import java.io.IOException;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.util.ModelSerializer;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.dl4j.train.RankAgreement;
import org.symmem4j.parallel.Group;

/**
 * Sharded checkpoints of any trainer whose ranks each keep a shard of the updater state: a directory with one
 * {@link ShardCheckpoint} file per rank ({@code shard-RRRRR-of-NNNNN.bin}) and {@code model.zip}, the consolidated
 * model written by DL4J's {@code ModelSerializer} with its full updater state, which a plain DL4J user loads.
 *
 * <p>Who writes what: every process writes the shard files of the ranks it runs (all of them in thread mode, its own
 * in group mode); the process that runs rank 0 (the leader) also deletes shard files of another world size and writes
 * {@code model.zip} and, last, the manifest ({@link CheckpointDirectory}: the step, epoch and counters, every file's
 * size and CRC-32C). Every file is written to a temporary name, forced to disk and moved over the final one, so a crash
 * never leaves a torn file under a final name, and a checkpoint whose manifest is missing or does not match its files
 * is torn: never loaded. On restore everything is checked before anything changes: each shard's header against
 * the rank that reads it, equal counters in every shard, the model file's parameters and counters against the shards;
 * only then are the shards' states read. Across the processes of a group, an {@link Agreement} makes every rank learn
 * that all files are written, or that some rank's restore failed (then every rank throws, each model as it was).
 *
 * <p>Knows nothing of the trainers: a trainer says which shards it holds ({@link Shard}), which DL4J model it trains,
 * and how its ranks agree; the words of the refusals name the trainer and its ranks as the trainer calls them
 * ({@link Words}).
 */
public final class ShardedCheckpoints {

    /**
     * One rank's shard, as the trainer holds it: what its file's header says, and the state it saves or reads into.
     *
     * @param rank           the rank, from 0
     * @param stage          ZeroStage name (informational in the file)
     * @param dataType       the model's data type (the state's)
     * @param paramCount     elements of the flat parameter vector the state shards
     * @param start          first parameter of the shard
     * @param end            one past its last
     * @param layoutHash     the fingerprint of DL4J's updater blocks ({@code UpdaterLayout.fingerprint()})
     * @param iterationCount DL4J's iteration counter of the rank's model, saved in the header
     * @param epochCount     DL4J's epoch counter of the rank's model, saved in the header
     * @param state          the shard's updater state, contiguous; null when the updater keeps none
     */
    public record Shard(int rank, String stage, DataType dataType, long paramCount, long start, long end,
                        long layoutHash, int iterationCount, int epochCount, INDArray state) {

        /** {@return the elements of the state, 0 when none} */
        long stateElements() {
            return state == null ? 0 : state.length();
        }
    }

    /**
     * The trainer's words in refusals: {@code this <trainer>'s <member> <rank>}, {@code <member>s=<n>}.
     *
     * @param trainer what the user built ("wrapper", "trainer")
     * @param member  what each shard belongs to ("worker", "rank")
     */
    public record Words(String trainer, String member) {
        public Words {
            Objects.requireNonNull(trainer, "trainer");
            Objects.requireNonNull(member, "member");
        }
    }

    /** How the ranks agree that every one got past a point of a save or restore; collective in group mode. */
    @FunctionalInterface
    public interface Agreement {

        /**
         * Every rank learns whether every rank got here without a failure: a rank whose {@code failure} is null
         * throws if another rank's is not; a rank with a failure returns (and throws its own).
         *
         * @param tag     the point, the same on every rank ("checkpoint-saved", "checkpoint-restored")
         * @param failure this rank's failure, or null
         */
        void failTogether(String tag, Throwable failure);

        /**
         * Agreement over {@code group}'s byte all-gather ({@link RankAgreement#failTogether}); in thread mode
         * ({@code group} null), where one process did it all, nothing to agree on. The others throw
         * {@code IllegalStateException("<tag> failed on rank <r>: <its failure> (every rank left its model as it was)")}.
         *
         * @param group     the trainer's group, or null in thread mode
         * @param tagPrefix makes the exchange's key unique to the trainer ("symmem4j-wrapper-")
         * @return the agreement; its caller's workers must be idle (the group's exchange runs on the caller's thread)
         */
        static Agreement over(Group group, String tagPrefix) {
            if (group == null) {
                return (tag, failure) -> {
                };
            }
            return (tag, failure) -> RankAgreement.failTogether(group, tagPrefix + tag, failure,
                    (r, theirs) -> new IllegalStateException(
                            tag + " failed on rank " + r + ": " + theirs + " (every rank left its model as it was)"));
        }
    }

    private ShardedCheckpoints() {
    }

    /**
     * What a restore read: the saved model and, when the checkpoint has a manifest, where it stands.
     *
     * @param model    the saved model (parameters and counters; with {@link #restoreModel} also its updater state)
     * @param counters the manifest's counters, or null for a checkpoint written before manifests
     */
    public record Restored(Model model, CheckpointDirectory.Counters counters) {
    }

    /**
     * Saves {@code shards} into {@code dir} (created when absent), and, from the leader (the process that runs rank
     * 0), {@code model} as {@code model.zip} with its full updater state, after deleting the shard files of another
     * world size; then every rank agrees that every file is in place ("checkpoint-saved"), the leader writes the
     * manifest ({@link CheckpointDirectory#writeManifest}: every file's size and CRC-32C, last), and every rank agrees
     * that it did ("checkpoint-complete"). Every file goes to a temporary name, is forced to disk and renamed; until
     * the manifest is written the directory is torn (the leader deletes an earlier manifest first). With no shards
     * ({@code worldSize} 0: a model-only checkpoint, plain data parallelism, whose {@code model.zip} holds every rank's
     * equal state) every shard file in {@code dir} is deleted.
     *
     * @param dir       the checkpoint directory
     * @param worldSize the number of shards (ranks), 0 for a model-only checkpoint
     * @param shards    the shards of the ranks this process writes, in rank order (may be empty)
     * @param leader    whether this process writes {@code model.zip} and the manifest (the one that runs rank 0)
     * @param model     the consolidated model, holding the full (gathered) updater state; written by the leader
     * @param counters  where the checkpoint stands, for its manifest
     * @param agreement how this process's ranks agree with the others'
     * @throws IOException when a file cannot be written
     */
    public static void save(Path dir, int worldSize, List<Shard> shards, boolean leader, Model model,
                            CheckpointDirectory.Counters counters, Agreement agreement) throws IOException {
        if (leader) {
            CheckpointDirectory.begin(dir); // torn from here until the manifest is written
            try (var listing = Files.list(dir)) {
                for (Path stale : listing.filter(f -> {
                    int ws = ShardCheckpoint.worldSizeOf(f);
                    return ws >= 0 && ws != worldSize;
                }).toList()) {
                    Files.delete(stale);
                }
            }
        } else {
            Files.createDirectories(dir);
        }
        for (Shard s : shards) {
            int r = s.rank();
            ShardCheckpoint.write(dir.resolve(ShardCheckpoint.shardFileName(r, worldSize)), new ShardCheckpoint.Header(
                    ShardCheckpoint.FORMAT_VERSION, worldSize, r, s.stage(), s.dataType().name(),
                    ByteOrder.nativeOrder().toString(), s.paramCount(), s.start(), s.end(), s.stateElements(),
                    s.iterationCount(), s.epochCount(), s.layoutHash()), s.state());
        }
        if (leader) {
            CheckpointDirectory.writeAtomically(dir.resolve(ShardCheckpoint.MODEL_FILE),
                    tmp -> ModelSerializer.writeModel(model, tmp.toFile(), true));
        }
        agreement.failTogether("checkpoint-saved", null); // every rank's file is in place before the manifest
        Throwable failure = null;
        if (leader) {
            try {
                CheckpointDirectory.writeManifest(dir, counters);
            } catch (IOException | RuntimeException e) {
                failure = e;
            }
        }
        agreement.failTogether("checkpoint-complete", failure);
        if (failure instanceof IOException io) {
            throw io;
        } else if (failure != null) {
            throw (RuntimeException) failure;
        }
    }

    /**
     * Checks this process's part of a checkpoint {@link #save} wrote and reads its shards' states into
     * {@code shards}' arrays, then agrees with the other ranks ("checkpoint-restored"): a failure on any rank makes
     * every rank throw. A directory with a manifest is verified against it first (a torn one is refused with a
     * {@link CheckpointDirectory.TornCheckpointException}); one without (written before manifests) is read as before.
     * Returns the saved model (parameters and counters; its updater state is not read: the shards hold it), which
     * nothing has taken yet. A shard that fails its checksum leaves its array with the file's bytes.
     *
     * @param dir       a directory {@link #save} wrote
     * @param worldSize the number of shards (ranks) the trainer runs
     * @param shards    the shards of the ranks this process runs, in rank order, each as it must be found in its file
     * @param model     the trainer's model: the saved one must hold as many parameters of the same type; its kind
     *                  ({@code MultiLayerNetwork} or {@code ComputationGraph}) says how to read {@code model.zip}
     * @param words     the trainer's words in the refusals
     * @param agreement how this process's ranks agree with the others'
     * @return the saved model, of {@code model}'s kind, and the manifest's counters
     * @throws IOException              when a file cannot be read, is truncated, fails its checksum or the manifest
     * @throws IllegalArgumentException when the checkpoint does not fit (world size, shard bounds, data type,
     *                                  updater layout, mixed steps)
     */
    public static Restored restore(Path dir, int worldSize, List<Shard> shards, Model model, Words words,
                                   Agreement agreement) throws IOException {
        Restored saved;
        try {
            CheckpointDirectory.Counters counters = countersOf(dir);
            saved = new Restored(read(dir, worldSize, shards, ModelReplica.of(model), words), counters);
        } catch (IOException | RuntimeException e) {
            agreement.failTogether("checkpoint-restored", e);
            throw e;
        }
        agreement.failTogether("checkpoint-restored", null);
        return saved;
    }

    /**
     * Reads a checkpoint's {@code model.zip} whole, updater state included: a model-only checkpoint's (plain data
     * parallelism), or any sharded one's (its model file holds the gathered state). Verified against its manifest when
     * it has one; collective as {@link #restore}.
     *
     * @param dir       a directory {@link #save} wrote
     * @param model     the trainer's model: the saved one must hold as many parameters of the same type
     * @param words     the trainer's words in the refusals
     * @param agreement how this process's ranks agree with the others'
     * @return the saved model with its updater state, and the manifest's counters
     * @throws IOException              when a file cannot be read or the checkpoint is torn
     * @throws IllegalArgumentException when the saved model does not fit
     */
    public static Restored restoreModel(Path dir, Model model, Words words, Agreement agreement) throws IOException {
        Restored saved;
        try {
            CheckpointDirectory.Counters counters = countersOf(dir);
            saved = new Restored(readModel(dir, ModelReplica.of(model), words, true).model(), counters);
        } catch (IOException | RuntimeException e) {
            agreement.failTogether("checkpoint-restored", e);
            throw e;
        }
        agreement.failTogether("checkpoint-restored", null);
        return saved;
    }

    /** The manifest's counters after verifying every file against it; null when {@code dir} has none (older format). */
    private static CheckpointDirectory.Counters countersOf(Path dir) throws IOException {
        return Files.isDirectory(dir) && Files.exists(dir.resolve(CheckpointDirectory.MANIFEST))
                ? CheckpointDirectory.verify(dir) : null;
    }

    private static ModelReplica readModel(Path dir, ModelReplica model, Words words, boolean withUpdater)
            throws IOException {
        File modelFile = dir.resolve(ShardCheckpoint.MODEL_FILE).toFile();
        if (!modelFile.isFile()) {
            throw new IllegalArgumentException("checkpoint " + dir + " has no " + ShardCheckpoint.MODEL_FILE);
        }
        ModelReplica saved = ModelReplica.of(model instanceof ModelReplica.Mln
                ? ModelSerializer.restoreMultiLayerNetwork(modelFile, withUpdater)
                : ModelSerializer.restoreComputationGraph(modelFile, withUpdater));
        if (saved.params().length() != model.params().length() || saved.params().dataType() != model.params().dataType()) {
            throw new IllegalArgumentException(modelFile + " holds " + saved.params().length() + " x "
                    + saved.params().dataType() + " parameters; this " + words.trainer() + "'s model "
                    + model.params().length() + " x " + model.params().dataType());
        }
        return saved;
    }

    private static Model read(Path dir, int n, List<Shard> shards, ModelReplica model, Words words) throws IOException {
        List<ShardCheckpoint.Header> headers = new ArrayList<>();
        for (Shard s : shards) {
            int r = s.rank();
            Path file = dir.resolve(ShardCheckpoint.shardFileName(r, n));
            if (!Files.isRegularFile(file)) {
                throw new IllegalArgumentException("checkpoint " + dir + " has no " + file.getFileName() + " for "
                        + words.member() + "s=" + n + "; shard files found: " + shardFiles(dir) + " (build the "
                        + words.trainer() + " with the " + words.member() + " count the checkpoint was saved with, or load "
                        + ShardCheckpoint.MODEL_FILE + " with ModelSerializer and build a " + words.trainer() + " with any "
                        + words.member() + " count on it)");
            }
            ShardCheckpoint.Header h = ShardCheckpoint.readHeader(file);
            String expected = "worldSize=" + n + " rank=" + r + " dataType=" + s.dataType() + " paramCount="
                    + s.paramCount() + " shard=[" + s.start() + "," + s.end() + ") stateElements="
                    + s.stateElements() + " layoutHash=" + s.layoutHash();
            String found = "worldSize=" + h.worldSize() + " rank=" + h.rank() + " dataType=" + h.dataType() + " paramCount="
                    + h.paramCount() + " shard=[" + h.shardStart() + "," + h.shardEnd() + ") stateElements="
                    + h.stateElements() + " layoutHash=" + h.layoutHash();
            if (!expected.equals(found)) {
                throw new IllegalArgumentException(file + " does not fit this " + words.trainer() + "'s " + words.member()
                        + " " + r + ": expected " + expected + ", found " + found + " (restore into a " + words.trainer()
                        + " built on the same network configuration with the same " + words.member() + " count)");
            }
            if (!headers.isEmpty() && (h.iterationCount() != headers.getFirst().iterationCount()
                    || h.epochCount() != headers.getFirst().epochCount())) {
                throw new IllegalArgumentException("checkpoint " + dir + " mixes steps: shard "
                        + shards.getFirst().rank() + " at iteration=" + headers.getFirst().iterationCount() + " epoch="
                        + headers.getFirst().epochCount() + ", shard " + r + " at iteration=" + h.iterationCount() + " epoch="
                        + h.epochCount() + " (save the checkpoint again)");
            }
            headers.add(h);
        }
        ModelReplica saved = readModel(dir, model, words, false);
        File modelFile = dir.resolve(ShardCheckpoint.MODEL_FILE).toFile();
        ShardCheckpoint.Header h0 = headers.getFirst();
        if (saved.iterationCount() != h0.iterationCount() || saved.epochCount() != h0.epochCount()) {
            throw new IllegalArgumentException(modelFile + " is at iteration=" + saved.iterationCount() + " epoch="
                    + saved.epochCount() + ", the shards at iteration=" + h0.iterationCount() + " epoch=" + h0.epochCount()
                    + " (files from different saves; save the checkpoint again)");
        }
        for (Shard s : shards) {
            ShardCheckpoint.readState(dir.resolve(ShardCheckpoint.shardFileName(s.rank(), n)), s.state());
        }
        return saved.model();
    }

    private static List<String> shardFiles(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) {
            return List.of();
        }
        try (var listing = Files.list(dir)) {
            return listing.filter(f -> ShardCheckpoint.worldSizeOf(f) >= 0).map(f -> f.getFileName().toString()).sorted()
                    .toList();
        }
    }
}
