package org.symmem4j.dl4j;

import java.io.File;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.channels.FileChannel;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.function.Function;
import org.deeplearning4j.nn.api.Model;
import org.deeplearning4j.util.ModelSerializer;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
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
 * is torn: never loaded. On restore everything is checked before anything changes: the stage that wrote the shards,
 * every shard's header against the trainer's model and layout, equal counters in every shard, the model file's
 * parameters and counters against the shards, and that the files' state ranges cover every range the trainer's shards
 * hold; only then are the shards' states read.
 *
 * <p>Re-sharding: each file describes its shard by global flat ranges ({@link ShardCheckpoint}: the parameters it
 * owns, and where its state lies in the trainer's flat updater-state space), so a checkpoint of N ranks restores onto
 * M: every new shard lists its own state ranges, and each of its elements is copied from the one file that holds it
 * (positional reads; with M = N, each rank's own file). Any cut writes the same format, one block per rank (ZeRO stages
 * 1 and 2) or one block per layer per rank. Across the processes of a group, an {@link Agreement} makes every rank learn
 * that all files are written, or that some rank's restore failed (then every rank throws, each model as it was).
 *
 * <p>ZeRO stage 3 ({@link FullyShardedCheckpoints}) writes each rank's parameters too, as a second file per rank in the
 * same format ({@code params-RRRRR-of-NNNNN.bin}, its ranges elements of the flat parameter vector) and no
 * {@code model.zip}: {@link #save} and {@link #restore} with parameter shards re-slice them as they do the states, so no
 * rank holds the whole parameter vector for a checkpoint.
 *
 * <p>Knows nothing of the trainers: a trainer says which shards it holds ({@link Shard}), which DL4J model it trains,
 * and how its ranks agree; the words of the refusals name the trainer and its ranks as the trainer calls them
 * ({@link Words}).
 */
public final class ShardedCheckpoints {

    private static final Logger LOG = LoggerFactory.getLogger(ShardedCheckpoints.class);

    /**
     * A range of elements of a flat vector, {@code [start, end)}: of the model's flat parameter vector, or of a
     * trainer's flat updater-state space.
     *
     * @param start the first element
     * @param end   one past the last
     */
    public record Range(long start, long end) {
        public Range {
            if (start < 0 || end < start) {
                throw new IllegalArgumentException("range [" + start + "," + end + "): expected 0 <= start <= end (fix:"
                        + " pass 0 <= start <= end; read from a checkpoint, its shard file is damaged: restore an earlier"
                        + " checkpoint)");
            }
        }

        /** {@return its elements} */
        public long length() {
            return end - start;
        }

        /**
         * The elements of several ranges.
         *
         * @param ranges the ranges
         * @return the sum of their lengths
         */
        public static long total(List<Range> ranges) {
            long n = 0;
            for (Range r : ranges) {
                n += r.length();
            }
            return n;
        }

        @Override
        public String toString() {
            return "[" + start + "," + end + ")";
        }
    }

    /**
     * One rank's shard, as the trainer holds it: what its file's header says, and the state it saves or reads into.
     * The shard is described by global flat ranges ({@link ShardCheckpoint}): the parameters it owns and where its
     * state lies in the trainer's flat state space, in the order of {@code state}'s elements. A contiguous ZeRO shard
     * has one parameter range and, per DL4J updater block it meets, one state range per state array (Adam's m, then
     * v); a shard cut per layer lists one parameter range per layer.
     *
     * @param rank           the rank, from 0
     * @param stage          what holds the shard: a ZeroStage name, {@code PIPELINE}; decides which trainers read it
     * @param dataType       the model's data type (the state's)
     * @param paramCount     elements of the flat parameter vector
     * @param paramRanges    the parameters the shard owns, ascending
     * @param stateCount     elements of the whole state space ({@code stateRanges} lie in {@code [0, stateCount)})
     * @param stateRanges    where {@code state}'s elements lie in the state space, in order
     * @param layoutHash     the fingerprint of the state space's layout ({@code UpdaterLayout.fingerprint()})
     * @param iterationCount DL4J's iteration counter of the rank's model, saved in the header
     * @param epochCount     DL4J's epoch counter of the rank's model, saved in the header
     * @param state          the shard's updater state, contiguous; null when the updater keeps none
     */
    public record Shard(int rank, String stage, DataType dataType, long paramCount, List<Range> paramRanges,
                        long stateCount, List<Range> stateRanges, long layoutHash, int iterationCount, int epochCount,
                        INDArray state) {

        public Shard {
            paramRanges = List.copyOf(paramRanges);
            stateRanges = List.copyOf(stateRanges);
            long elements = state == null ? 0 : state.length();
            if (Range.total(stateRanges) != elements) {
                throw new IllegalArgumentException("shard " + rank + ": state ranges " + stateRanges + " hold "
                        + Range.total(stateRanges) + " elements, its state " + elements + " (fix: give state ranges that"
                        + " cover exactly the state's elements; read from a checkpoint, its shard file is damaged:"
                        + " restore an earlier checkpoint)");
            }
        }

        /** {@return the elements of the state, 0 when none} */
        long stateElements() {
            return state == null ? 0 : state.length();
        }
    }

    /**
     * What a trainer's restore reads: the shards of which stages (those that hold what its own shards hold), how a
     * format-1 file laid out the state of its one parameter range, and whether a checkpoint without shard files (plain
     * data parallelism: {@code model.zip} holds every rank's equal state) may be sharded from the model's full state.
     *
     * @param stages        the stage names ({@link Shard#stage()}) whose shards this trainer reads
     * @param what          how the refusals name those shards ("ZeRO OPTIMIZER_STATE or GRADIENTS shards")
     * @param stateRangesOf for a format-1 file: the state ranges of a parameter range, in the order the shard held them
     * @param fromModel     whether a model-only checkpoint is read, its full updater state cut into this trainer's shards
     * @param sameCut       whether the files must be cut as this trainer's shards are (same rank count, each file the
     *                      parameter ranges of the shard of its rank): for a trainer whose state space depends on the
     *                      cut (a pipeline's stages each keep their own updater layout); false re-shards N → M
     */
    public record Reads(Set<String> stages, String what, Function<Range, List<Range>> stateRangesOf, boolean fromModel,
                        boolean sameCut) {
        public Reads {
            stages = Set.copyOf(stages);
            Objects.requireNonNull(what, "what");
            Objects.requireNonNull(stateRangesOf, "stateRangesOf");
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
                            tag + " failed on rank " + r + ": " + theirs + " (every rank left its model as it was; fix:"
                                    + " correct what rank " + r + "'s error names, then retry on every rank)"));
        }
    }

    private ShardedCheckpoints() {
    }

    /**
     * What a restore read: the saved model and, when the checkpoint has a manifest, where it stands.
     *
     * @param model      the saved model (parameters and counters; with {@link #restoreModel} also its updater state)
     * @param counters   the manifest's counters, or null for a checkpoint written before manifests
     * @param savedRanks the number of shard files the state was read from (the rank count that wrote them; 0 when
     *                   it was cut from {@code model.zip}'s full state, and for {@link #restoreModel})
     */
    public record Restored(Model model, CheckpointDirectory.Counters counters, int savedRanks) {
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
        save(dir, worldSize, shards, List.of(), leader, Objects.requireNonNull(model, "model"), counters, agreement);
    }

    /**
     * {@link #save}, for ranks that also own a shard of the parameters (ZeRO stage 3): each shard of
     * {@code paramShards} is written as {@code params-RRRRR-of-NNNNN.bin} in the same format, its state the
     * parameters the rank owns (its state ranges elements of the flat parameter vector), so no rank ever holds the
     * whole vector; with {@code model} null no {@code model.zip} is written (the leader deletes an earlier one, and
     * parameter shard files when it writes none), and a restore reads the parameters from the parameter shards.
     *
     * @param paramShards the parameter shards of the ranks this process writes, in rank order (empty: none)
     * @param model       the consolidated model, or null for none
     */
    public static void save(Path dir, int worldSize, List<Shard> shards, List<Shard> paramShards, boolean leader,
                            Model model, CheckpointDirectory.Counters counters, Agreement agreement) throws IOException {
        if (!CheckpointEvent.TYPE.isEnabled()) {
            write(dir, worldSize, shards, paramShards, leader, model, counters, agreement);
            return;
        }
        CheckpointEvent event = new CheckpointEvent();
        event.begin();
        event.directory = dir.toString();
        event.step = counters.step();
        event.worldSize = worldSize;
        event.shards = shards.size();
        event.leader = leader;
        try {
            write(dir, worldSize, shards, paramShards, leader, model, counters, agreement);
            event.outcome = "COMPLETED";
        } catch (IOException | RuntimeException | Error e) {
            event.outcome = "FAILED";
            event.failure = e.toString();
            throw e;
        } finally {
            event.end();
            event.bytes = bytesWritten(dir, worldSize, shards, paramShards, leader);
            event.commit();
        }
    }

    /** The sizes of the files {@link #write} wrote for this process (those present: after a failure, fewer). */
    private static long bytesWritten(Path dir, int worldSize, List<Shard> shards, List<Shard> paramShards,
                                     boolean leader) {
        List<Path> files = new ArrayList<>();
        for (Shard s : shards) {
            files.add(dir.resolve(ShardCheckpoint.shardFileName(s.rank(), worldSize)));
        }
        for (Shard s : paramShards) {
            files.add(dir.resolve(ShardCheckpoint.paramsFileName(s.rank(), worldSize)));
        }
        if (leader) {
            files.add(dir.resolve(ShardCheckpoint.MODEL_FILE));
            files.add(dir.resolve(CheckpointDirectory.MANIFEST));
        }
        long bytes = 0;
        for (Path f : files) {
            try {
                bytes += Files.size(f);
            } catch (IOException absent) {
                // not written (the save failed before it): counts nothing
            }
        }
        return bytes;
    }

    private static void write(Path dir, int worldSize, List<Shard> shards, List<Shard> paramShards, boolean leader,
                              Model model, CheckpointDirectory.Counters counters, Agreement agreement) throws IOException {
        try {
            writeFiles(dir, worldSize, shards, paramShards, leader, model);
        } catch (IOException | RuntimeException e) {
            // the others learn of it here, rather than wait for this rank at "checkpoint-saved" until their timeout
            agreement.failTogether("checkpoint-saved", e);
            throw e;
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

    /** {@link #write}'s files of this process, before the ranks agree that every rank's are in place. */
    private static void writeFiles(Path dir, int worldSize, List<Shard> shards, List<Shard> paramShards, boolean leader,
                                   Model model) throws IOException {
        if (leader) {
            CheckpointDirectory.begin(dir); // torn from here until the manifest is written
            boolean params = !paramShards.isEmpty();
            try (var listing = Files.list(dir)) {
                for (Path stale : listing.filter(f -> {
                    int ws = ShardCheckpoint.worldSizeOf(f);
                    int wp = ShardCheckpoint.worldSizeOf(f, true);
                    return ws >= 0 && ws != worldSize || wp >= 0 && (wp != worldSize || !params)
                            || model == null && f.getFileName().toString().equals(ShardCheckpoint.MODEL_FILE);
                }).toList()) {
                    Files.delete(stale);
                }
            }
        } else {
            Files.createDirectories(dir);
        }
        for (Shard s : shards) {
            writeShard(dir.resolve(ShardCheckpoint.shardFileName(s.rank(), worldSize)), worldSize, s);
        }
        for (Shard s : paramShards) {
            writeShard(dir.resolve(ShardCheckpoint.paramsFileName(s.rank(), worldSize)), worldSize, s);
        }
        if (leader && model != null) {
            CheckpointDirectory.writeAtomically(dir.resolve(ShardCheckpoint.MODEL_FILE),
                    tmp -> ModelSerializer.writeModel(model, tmp.toFile(), true));
        }
    }

    private static void writeShard(Path file, int worldSize, Shard s) throws IOException {
        ShardCheckpoint.write(file, new ShardCheckpoint.Header(ShardCheckpoint.FORMAT_VERSION, worldSize, s.rank(),
                s.stage(), s.dataType().name(), ByteOrder.nativeOrder().toString(), s.paramCount(), s.stateCount(),
                s.paramRanges(), s.stateRanges(), s.stateElements(), s.iterationCount(), s.epochCount(), s.layoutHash(),
                0), s.state());
    }

    /**
     * Checks a checkpoint {@link #save} wrote against this process's shards and reads their states into
     * {@code shards}' arrays, then agrees with the other ranks ("checkpoint-restored"): a failure on any rank makes
     * every rank throw. The checkpoint may have been written by any number of ranks: each shard file says which global
     * ranges of the state space it holds, and each of {@code shards} takes its ranges from whichever files hold them
     * (re-sharding N → M; with N = M each rank reads its own file). A checkpoint without shard files (plain data
     * parallelism) is cut into the shards from {@code model.zip}'s full updater state when {@code reads} allows it.
     * A directory with a manifest is verified against it first (a torn one is refused with a
     * {@link CheckpointDirectory.TornCheckpointException}); one without (written before manifests) is read with each
     * used file's own checksum verified first. Everything is checked before any array is written: the stage that wrote
     * the shards, every header (data type, parameter count, state space and its layout, byte order), equal counters in
     * every shard and the model file, and that the files' ranges cover every range of {@code shards} exactly once.
     * Returns the saved model (parameters and counters; its updater state is not read when shards hold it), which
     * nothing has taken yet.
     *
     * @param dir       a directory {@link #save} wrote
     * @param worldSize the number of shards (ranks) the trainer runs
     * @param shards    the shards of the ranks this process runs, in rank order, each as it must be found in the files
     * @param model     the trainer's model: the saved one must hold as many parameters of the same type; its kind
     *                  ({@code MultiLayerNetwork} or {@code ComputationGraph}) says how to read {@code model.zip}
     * @param words     the trainer's words in the refusals
     * @param reads     which shards this trainer reads, and how
     * @param agreement how this process's ranks agree with the others'
     * @return the saved model, of {@code model}'s kind, the manifest's counters and the rank count that wrote it
     * @throws IOException              when a file cannot be read, is truncated, fails its checksum or the manifest
     * @throws IllegalArgumentException when the checkpoint does not fit (another stage, data type, parameter count,
     *                                  updater layout, mixed steps, ranges that do not cover the shards)
     */
    public static Restored restore(Path dir, int worldSize, List<Shard> shards, Model model, Words words, Reads reads,
                                   Agreement agreement) throws IOException {
        return restore(dir, worldSize, shards, List.of(), model, words, reads, agreement);
    }

    /**
     * {@link #restore}, for ranks that also own a shard of the parameters (ZeRO stage 3): with {@code paramShards}
     * not empty the parameters are read from the checkpoint's parameter shard files ({@code params-*-of-N.bin}) into
     * them, re-sliced as the states are (any N), and no {@code model.zip} is read: the restored model is null, the
     * counters the manifest's, which such a checkpoint must have (without one it is torn). Every parameter file is
     * checked as the state files are, before any array is written.
     *
     * @param paramShards the parameter shards of the ranks this process runs, in rank order (empty: none)
     */
    public static Restored restore(Path dir, int worldSize, List<Shard> shards, List<Shard> paramShards, Model model,
                                   Words words, Reads reads, Agreement agreement) throws IOException {
        Restored saved;
        try {
            // a stage-3 checkpoint is complete only with its manifest: without one it is torn
            CheckpointDirectory.Counters counters = paramShards.isEmpty() || !Files.isDirectory(dir) ? countersOf(dir)
                    : CheckpointDirectory.verify(dir);
            saved = read(dir, worldSize, shards, paramShards, ModelReplica.of(model), words, reads, counters);
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
            saved = new Restored(readModel(dir, ModelReplica.of(model), words, true).model(), counters, 0);
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
            throw new IllegalArgumentException("checkpoint " + dir + " has no " + ShardCheckpoint.MODEL_FILE
                    + (stage3(dir, words).isEmpty() ? " (fix: pass the directory saveCheckpoint wrote, or restore an"
                    + " earlier, complete checkpoint)" : stage3(dir, words)));
        }
        ModelReplica saved = ModelReplica.of(model instanceof ModelReplica.Mln
                ? ModelSerializer.restoreMultiLayerNetwork(modelFile, withUpdater)
                : ModelSerializer.restoreComputationGraph(modelFile, withUpdater));
        if (saved.params().length() != model.params().length() || saved.params().dataType() != model.params().dataType()) {
            throw new IllegalArgumentException(modelFile + " holds " + saved.params().length() + " x "
                    + saved.params().dataType() + " parameters; this " + words.trainer() + "'s model "
                    + model.params().length() + " x " + model.params().dataType() + " (fix: restore into a"
                    + " " + words.trainer()
                    + " built on the network configuration the checkpoint was saved from)");
        }
        return saved;
    }

    /** Where some of the state space's elements are read from: a shard file's run, or the model's full state. */
    private interface Source {
        /** Copies {@code bytes} bytes from byte {@code sourceByte} of the source's state into {@code target}. */
        void copy(long sourceByte, MemorySegment target, long targetByte, long bytes) throws IOException;
    }

    /** Elements {@code [start, end)} of the state space lie at element {@code at} of {@code source}'s state. */
    private record Run(long start, long end, Source source, long at, String from) {
    }

    /** One copy of a restore's plan: {@code bytes} bytes of a source into a shard's state. */
    private record Copy(Source source, long sourceByte, MemorySegment target, long targetByte, long bytes) {
    }

    private static Restored read(Path dir, int m, List<Shard> shards, List<Shard> paramShards, ModelReplica model,
                                 Words words, Reads reads, CheckpointDirectory.Counters counters) throws IOException {
        if (!Files.isDirectory(dir)) {
            throw new IllegalArgumentException("checkpoint " + dir + " is not a directory (fix: give the directory that"
                    + " saveCheckpoint or checkpointEvery wrote)");
        }
        List<Path> files = savedShardFiles(dir, counters, words, false);
        if (files.isEmpty()) {
            if (!reads.fromModel() || !paramShards.isEmpty()) {
                throw new IllegalArgumentException("checkpoint " + dir + " has no shard files; this " + words.trainer()
                        + " reads " + reads.what() + " (fix: restore it into the trainer that wrote it)");
            }
            return readFromModel(dir, shards, model, words, counters);
        }
        int n = files.size();
        if (reads.sameCut() && n != m) {
            throw new IllegalArgumentException("checkpoint " + dir + " has no " + ShardCheckpoint.shardFileName(0, m)
                    + " for " + words.member() + "s=" + m + "; shard files found: " + shardFiles(dir) + " (fix:"
                    + " restore into a "
                    + words.trainer() + " with the " + words.member() + "s the checkpoint was saved with, or load "
                    + ShardCheckpoint.MODEL_FILE + " with ModelSerializer and build a " + words.trainer() + " of any "
                    + words.member() + " count on it)");
        }
        List<ShardCheckpoint.Header> headers = new ArrayList<>(n);
        List<ChannelSource> sources = new ArrayList<>(n);
        List<Copy> plan = plan(dir, shards, runsOf(dir, files, m, shards, model, words, reads, counters, headers,
                sources), words);
        ModelReplica saved = null;
        ShardCheckpoint.Header h0 = headers.getFirst();
        if (!paramShards.isEmpty()) {
            List<Path> paramFiles = savedShardFiles(dir, counters, words, true);
            if (paramFiles.size() != n) {
                throw new IllegalArgumentException("checkpoint " + dir + " holds " + n + " state shard files and "
                        + paramFiles.size() + " parameter shard files; this " + words.trainer() + " reads ZeRO stage 3's"
                        + " parameter shards (" + ShardCheckpoint.paramsFileName(0, n) + " ...): found " + shardFiles(dir)
                        + " (fix: restore a checkpoint a sharding(PARAMETERS) " + words.trainer() + " saved; another stage's:"
                        + " build a " + words.trainer() + " on its " + ShardCheckpoint.MODEL_FILE + ")");
            }
            plan.addAll(plan(dir, paramShards, runsOf(dir, paramFiles, m, paramShards, model, words, reads, counters,
                    headers, sources), words));
            if (counters.iteration() != h0.iterationCount() || counters.epoch() != h0.epochCount()) {
                throw new IllegalArgumentException("checkpoint " + dir + "'s manifest is at iteration="
                        + counters.iteration() + " epoch=" + counters.epoch() + ", its shards at iteration="
                        + h0.iterationCount() + " epoch=" + h0.epochCount() + " (files from different saves; fix: save the"
                        + " checkpoint again)");
            }
        } else {
            saved = readModel(dir, model, words, false);
            File modelFile = dir.resolve(ShardCheckpoint.MODEL_FILE).toFile();
            if (saved.iterationCount() != h0.iterationCount() || saved.epochCount() != h0.epochCount()) {
                throw new IllegalArgumentException(modelFile + " is at iteration=" + saved.iterationCount() + " epoch="
                        + saved.epochCount() + ", the shards at iteration=" + h0.iterationCount() + " epoch="
                        + h0.epochCount() + " (files from different saves; fix: save the checkpoint again)");
            }
        }
        try {
            for (Copy c : plan) { // the files it reads: sizes, and checksums where no manifest vouched for them
                if (c.source() instanceof ChannelSource cs) {
                    cs.prepare();
                }
            }
            for (Copy c : plan) { // every check passed: from here on the shards' arrays change
                c.source().copy(c.sourceByte(), c.target(), c.targetByte(), c.bytes());
            }
        } finally {
            for (ChannelSource s : sources) {
                s.close();
            }
        }
        if (n != m) {
            LOG.info("symmem4j checkpoint: re-sharded {} from {} {}s to {} ({} copies)", dir, n, words.member(), m,
                    plan.size());
        }
        return new Restored(saved == null ? null : saved.model(), counters, n);
    }

    /**
     * The runs of a checkpoint's shard files (state, or stage 3's parameter files): every header checked against the
     * trainer's {@code shards} (appended to {@code headers}), every file a source (appended to {@code sources}, opened
     * on first use), its ranges' runs sorted by start; refuses two files that hold the same element.
     */
    private static List<Run> runsOf(Path dir, List<Path> files, int m, List<Shard> shards, ModelReplica model,
                                    Words words, Reads reads, CheckpointDirectory.Counters counters,
                                    List<ShardCheckpoint.Header> headers, List<ChannelSource> sources)
            throws IOException {
        int n = files.size();
        List<Run> runs = new ArrayList<>();
        for (Path file : files) {
            ShardCheckpoint.Header h = ShardCheckpoint.readHeader(file);
            checkStage(dir, file, h, words, reads);
            if (reads.sameCut()) {
                for (Shard s : shards) {
                    if (s.rank() == h.rank() && !s.paramRanges().equals(h.paramRanges())) {
                        throw new IllegalArgumentException(file + " does not fit this " + words.trainer() + "'s "
                                + words.member() + " " + s.rank() + ": expected worldSize=" + m + " rank=" + s.rank()
                                + " shard=" + ranges(s.paramRanges()) + ", found worldSize=" + h.worldSize() + " rank="
                                + h.rank() + " shard=" + ranges(h.paramRanges()) + " (fix: restore into a"
                                + " " + words.trainer()
                                + " built on the same network configuration with the same " + words.member() + "s)");
                    }
                }
            }
            check(dir, file, h, n, shards, model, words, reads, headers);
            List<Range> stateRanges = h.stateRanges() != null ? h.stateRanges() : reads.stateRangesOf().apply(
                    h.paramRanges().getFirst());
            if (Range.total(stateRanges) != h.stateElements()) {
                throw new IllegalArgumentException(file + " holds stateElements=" + h.stateElements() + " for parameters "
                        + h.paramRanges() + ", whose state in this " + words.trainer() + "'s layout is " + stateRanges
                        + " (" + Range.total(stateRanges) + " elements) (fix: restore into a " + words.trainer()
                        + " built on the network configuration the checkpoint was saved from)");
            }
            ChannelSource source = new ChannelSource(file, h, counters == null);
            sources.add(source);
            long at = 0;
            for (Range r : stateRanges) {
                runs.add(new Run(r.start(), r.end(), source, at, file.getFileName().toString()));
                at += r.length();
            }
            headers.add(h);
        }
        runs.sort(java.util.Comparator.comparingLong(Run::start));
        for (int i = 1; i < runs.size(); i++) {
            if (runs.get(i).start() < runs.get(i - 1).end()) {
                throw new IllegalArgumentException("checkpoint " + dir + ": " + runs.get(i - 1).from() + " and "
                        + runs.get(i).from() + " both hold state elements [" + runs.get(i).start() + ","
                        + Math.min(runs.get(i).end(), runs.get(i - 1).end()) + ") (files of different saves; fix: save the"
                        + " checkpoint again, or restore an earlier one)");
            }
        }
        return runs;
    }

    /**
     * The shard files of the checkpoint, in rank order: those of the rank count its manifest names (files of another
     * count are not part of it), or, without a manifest, of the one rank count found; every rank's file present.
     */
    private static List<Path> savedShardFiles(Path dir, CheckpointDirectory.Counters counters, Words words,
                                              boolean params) throws IOException {
        java.util.TreeMap<Integer, java.util.TreeMap<Integer, Path>> byWorld = new java.util.TreeMap<>();
        try (var listing = Files.list(dir)) {
            for (Path f : listing.toList()) {
                int ws = ShardCheckpoint.worldSizeOf(f, params);
                if (ws >= 0 && Files.isRegularFile(f)) {
                    byWorld.computeIfAbsent(ws, k -> new java.util.TreeMap<>()).put(ShardCheckpoint.rankOf(f), f);
                }
            }
        }
        if (byWorld.isEmpty()) {
            return List.of();
        }
        int n;
        if (counters != null && byWorld.containsKey(counters.ranks())) {
            n = counters.ranks();
        } else if (counters != null) {
            return List.of(); // a model-only checkpoint: stray shard files are not part of it
        } else if (byWorld.size() == 1) {
            n = byWorld.firstKey();
        } else {
            throw new IllegalArgumentException("checkpoint " + dir + " has shard files of " + byWorld.keySet()
                    + " " + words.member() + "s and no manifest to say which are its own (fix: save the"
                    + " checkpoint again)");
        }
        java.util.TreeMap<Integer, Path> files = byWorld.get(n);
        List<Integer> missing = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            if (!files.containsKey(r)) {
                missing.add(r);
            }
        }
        if (!missing.isEmpty() || files.size() != n) {
            throw new IllegalArgumentException("checkpoint " + dir + " of " + words.member() + "s=" + n + " lacks the shard"
                    + " files of " + words.member() + "s " + missing + "; found " + shardFiles(dir)
                    + " (every shard file is needed to restore; fix: save the checkpoint again)");
        }
        return List.copyOf(files.values());
    }

    /**
     * What to do with a checkpoint of ZeRO stage 3 (parameter shard files and no {@code model.zip}) in a trainer of
     * another stage; empty when {@code dir} holds no parameter shards.
     */
    private static String stage3(Path dir, Words words) throws IOException {
        try (var listing = Files.list(dir)) {
            if (listing.noneMatch(f -> ShardCheckpoint.worldSizeOf(f, true) >= 0)) {
                return "";
            }
        }
        return ": it is a ZeRO stage-3 checkpoint (parameter shards " + shardFiles(dir) + ", no consolidated model);"
                + " expected a " + words.trainer() + " with sharding(PARAMETERS) (fix: restore it into one, of any "
                + words.member() + " count, and write the whole model with saveModel(file) to build this "
                + words.trainer() + " on)";
    }

    /** Refuses the shards of a stage whose state this trainer does not keep, before anything else. */
    private static void checkStage(Path dir, Path file, ShardCheckpoint.Header h, Words words, Reads reads)
            throws IOException {
        if (!reads.stages().contains(h.stage()) && !stage3(dir, words).isEmpty()) {
            // error-message: stage3(dir, words) is non-empty here and ends with the fix
            throw new IllegalArgumentException("checkpoint " + dir + " holds shards of stage=" + h.stage() + " ("
                    + file.getFileName() + ") and no " + ShardCheckpoint.MODEL_FILE + stage3(dir, words));
        }
        if (!reads.stages().contains(h.stage())) {
            throw new IllegalArgumentException("checkpoint " + dir + " holds shards of stage=" + h.stage() + " (" + file
                    .getFileName() + "); this " + words.trainer() + " reads " + reads.what() + " (fix: restore"
                            + " it into a "
                    + words.trainer() + " of the stage that wrote it, or load " + ShardCheckpoint.MODEL_FILE + " with"
                    + " ModelSerializer, which holds the whole model with its updater state, and build the "
                    + words.trainer() + " on that model)");
        }
    }

    /** A shard file's header against the checkpoint and this trainer: everything before any state is read. */
    private static void check(Path dir, Path file, ShardCheckpoint.Header h, int n, List<Shard> shards, ModelReplica model,
                              Words words, Reads reads, List<ShardCheckpoint.Header> before) {
        if (h.worldSize() != n || h.rank() != ShardCheckpoint.rankOf(file)) {
            throw new IllegalArgumentException(file + " says worldSize=" + h.worldSize() + " rank=" + h.rank()
                    + ", its name worldSize=" + n + " rank=" + ShardCheckpoint.rankOf(file)
                    + " (a renamed file; fix: save the checkpoint again)");
        }
        // the shard of the file's rank when this process runs it (a pipeline's stages each have their own layout),
        // else any: a data-parallel trainer's shards share one layout
        Shard s = shards.stream().filter(x -> x.rank() == h.rank()).findFirst()
                .orElse(shards.isEmpty() ? null : shards.getFirst());
        String expected = "dataType=" + model.params().dataType() + " paramCount=" + model.params().length()
                + (s == null ? "" : " stateCount=" + s.stateCount() + " layoutHash=" + s.layoutHash())
                + " byteOrder=" + ByteOrder.nativeOrder();
        String found = "dataType=" + h.dataType() + " paramCount=" + h.paramCount()
                + (s == null ? "" : " stateCount=" + (h.stateCount() < 0 ? s.stateCount() : h.stateCount())
                + " layoutHash=" + h.layoutHash()) + " byteOrder=" + h.byteOrder();
        if (!expected.equals(found)) {
            throw new IllegalArgumentException(file + " does not fit this " + words.trainer() + "'s model: expected "
                    + expected + ", found " + found + " (fix: restore into a " + words.trainer() + " built on"
                    + " the network"
                    + " configuration and data type the checkpoint was saved from; another byte order: load "
                    + ShardCheckpoint.MODEL_FILE + " with ModelSerializer)");
        }
        if (!before.isEmpty() && (h.iterationCount() != before.getFirst().iterationCount()
                || h.epochCount() != before.getFirst().epochCount())) {
            throw new IllegalArgumentException("checkpoint " + dir + " mixes steps: shard 0 at iteration="
                    + before.getFirst().iterationCount() + " epoch=" + before.getFirst().epochCount() + ", shard "
                    + h.rank() + " at iteration=" + h.iterationCount() + " epoch=" + h.epochCount()
                    + " (fix: save the checkpoint again)");
        }
    }

    /** The copies that fill every range of {@code shards} from {@code runs} (sorted, disjoint); refuses a gap. */
    private static List<Copy> plan(Path dir, List<Shard> shards, List<Run> runs, Words words) {
        List<Copy> plan = new ArrayList<>();
        for (Shard s : shards) {
            if (s.state() == null) {
                continue;
            }
            MemorySegment target = ModelReplica.segmentOf(s.state());
            long width = s.state().dataType().width();
            long at = 0;
            for (Range r : s.stateRanges()) {
                long covered = 0;
                int i = firstRunEndingAfter(runs, r.start());
                for (; i < runs.size() && runs.get(i).start() < r.end(); i++) {
                    Run run = runs.get(i);
                    long a = Math.max(r.start(), run.start());
                    long b = Math.min(r.end(), run.end());
                    if (a < b) {
                        plan.add(new Copy(run.source(), (run.at() + a - run.start()) * width, target,
                                (at + a - r.start()) * width, (b - a) * width));
                        covered += b - a;
                    }
                }
                if (covered != r.length()) {
                    throw new IllegalArgumentException("checkpoint " + dir + " does not hold every state element of "
                            + words.member() + " " + s.rank() + "'s range " + r + " (" + covered + " of " + r.length()
                            + " found in its shard files; files of different saves or layouts; fix: save the checkpoint"
                            + " again)");
                }
                at += r.length();
            }
        }
        return plan;
    }

    private static String ranges(List<Range> ranges) {
        return ranges.size() == 1 ? ranges.getFirst().toString() : ranges.toString();
    }

    private static int firstRunEndingAfter(List<Run> runs, long element) {
        int lo = 0;
        int hi = runs.size();
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (runs.get(mid).end() <= element) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lo;
    }

    /**
     * A model-only checkpoint (plain data parallelism) into shards: {@code model.zip}'s full updater state, the one
     * range {@code [0, stateCount)}, cut into the shards' ranges.
     */
    private static Restored readFromModel(Path dir, List<Shard> shards, ModelReplica model, Words words,
                                          CheckpointDirectory.Counters counters) throws IOException {
        return cutFromModel(dir, readModel(dir, model, words, true), shards, words, counters);
    }

    /**
     * A model's full updater state cut into {@code shards} (ZeRO stages 1 and 2): what a model-only checkpoint's
     * restore does with its {@code model.zip}, for a model the caller made (a tensor-parallel shard re-sliced from
     * another degree's checkpoint). Not collective: the caller agrees with the other ranks before and after.
     *
     * @param dir      the checkpoint, for messages
     * @param saved    the model whose state the shards take, with its updater state
     * @param shards   the shards of the ranks this process runs
     * @param words    the trainer's words in the refusals
     * @param counters the checkpoint's counters
     * @return the saved model and the counters
     * @throws IOException              when a copy fails
     * @throws IllegalArgumentException when the state's size is not the shards'
     */
    static Restored cutFromModel(Path dir, ModelReplica saved, List<Shard> shards, Words words,
                                 CheckpointDirectory.Counters counters) throws IOException {
        INDArray full = saved.updaterState();
        long stateCount = shards.isEmpty() ? 0 : shards.getFirst().stateCount();
        long found = full == null ? 0 : full.length();
        if (!shards.isEmpty() && found != stateCount) {
            throw new IllegalArgumentException(dir.resolve(ShardCheckpoint.MODEL_FILE) + " holds " + found
                    + " updater-state elements; this " + words.trainer() + "'s model " + stateCount + " (fix:"
                    + " restore into a "
                    + words.trainer() + " built on the network configuration the checkpoint was saved from)");
        }
        List<Run> runs = new ArrayList<>();
        if (found > 0) {
            MemorySegment all = ModelReplica.segmentOf(full);
            runs.add(new Run(0, found, (from, target, at, bytes) -> MemorySegment.copy(all, from, target, at, bytes), 0,
                    ShardCheckpoint.MODEL_FILE));
        }
        for (Copy c : plan(dir, shards, runs, words)) {
            c.source().copy(c.sourceByte(), c.target(), c.targetByte(), c.bytes());
        }
        return new Restored(saved.model(), counters, 0);
    }

    /** A shard file read by positional reads, opened (and, without a manifest, its checksum verified) on first use. */
    private static final class ChannelSource implements Source {
        private final Path file;
        private final ShardCheckpoint.Header header;
        private final boolean verifyFirst;
        private FileChannel channel;

        ChannelSource(Path file, ShardCheckpoint.Header header, boolean verifyFirst) {
            this.file = file;
            this.header = header;
            this.verifyFirst = verifyFirst;
        }

        /** Verifies the checksum when no manifest did: before the plan writes anything. */
        void prepare() throws IOException {
            if (channel == null) {
                if (verifyFirst) {
                    ShardCheckpoint.verifyChecksum(file);
                }
                channel = ShardCheckpoint.open(file);
                long expected = header.dataOffset() + ShardCheckpoint.elementBytes(file, header) + Long.BYTES;
                if (channel.size() != expected) {
                    throw new IOException(file + ": " + channel.size() + " bytes, its header says " + expected
                            + " (truncated or damaged; fix: save the checkpoint again)");
                }
            }
        }

        @Override
        public void copy(long sourceByte, MemorySegment target, long targetByte, long bytes) throws IOException {
            prepare();
            ShardCheckpoint.readRun(channel, file, header, sourceByte, target, targetByte, bytes);
        }

        void close() throws IOException {
            if (channel != null) {
                channel.close();
            }
        }
    }

    private static List<String> shardFiles(Path dir) throws IOException {
        if (!Files.isDirectory(dir)) {
            return List.of();
        }
        try (var listing = Files.list(dir)) {
            return listing.filter(f -> ShardCheckpoint.rankOf(f) >= 0).map(f -> f.getFileName().toString()).sorted()
                    .toList();
        }
    }
}
