package org.symmem4j.dl4j.train;

import java.io.IOException;
import java.io.InputStream;
import java.io.Reader;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import java.util.zip.CRC32C;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Checkpoints that are complete or detected as torn, for every trainer: a checkpoint is a directory whose files are
 * each written to a temporary name, forced to disk ({@code FileChannel.force}) and renamed, and whose manifest
 * ({@value #MANIFEST}: the step, epoch, iteration, batches and examples of the epoch already trained, rank count, and
 * every file's name, size and CRC-32C) is written last, the same way, before the directory itself is forced. A directory whose
 * manifest is missing, unreadable, or does not match its files (a file missing, of another size or checksum) is
 * torn: {@link #latestComplete} skips it with a log line and never returns it.
 *
 * <p>The periodic checkpoints of a run live under one root, one directory per step ({@code step-<n>}, n zero-padded
 * to 12 digits so names sort by step); {@link #prune} keeps the newest complete ones and deletes the older ones,
 * complete or torn. A torn directory newer than the newest complete one (a write that did not finish) stays until the
 * run writes that step again; it is never loaded.
 *
 * <p>Knows nothing of what the files hold: the trainers write them ({@code ShardedCheckpoints}).
 */
public final class CheckpointDirectory {

    /** The manifest's file name inside a checkpoint directory. */
    public static final String MANIFEST = "manifest.properties";
    /**
     * The file under a run's checkpoint root that says the last step the run recorded as done ({@link #recordProgress}),
     * so that a restarted run can say how many steps it does again.
     */
    public static final String PROGRESS = "progress";
    /**
     * Fault injection, for tests only: {@code -Dsymmem4j.faultInjection.haltWriting=step-000000000010/manifest.properties}
     * (a path under the checkpoint root) makes {@link #writeAtomically} of that file write half of its bytes to the
     * temporary file and halt the JVM ({@code Runtime.halt(137)}, no shutdown hooks), as a crash in the middle of the
     * write would. Read at each write.
     */
    public static final String HALT_WRITING_PROPERTY = "symmem4j.faultInjection.haltWriting";
    private static final String FORMAT = "symmem4j-checkpoint-1";
    private static final Pattern STEP_DIR = Pattern.compile("step-(\\d{12})");
    private static final String FILE_KEY = "file.";
    private static final Logger LOG = LoggerFactory.getLogger(CheckpointDirectory.class);

    /**
     * Where a checkpoint stands in the run, as its manifest says.
     *
     * @param step           the trainer's steps done (over every {@code fit}) when it was taken
     * @param epoch          the model's epoch counter ({@code fit(iterator)} calls completed)
     * @param iteration      the model's iteration counter
     * @param batchesInEpoch  batches of the epoch under way already trained (0 when taken between {@code fit} calls):
     *                        the first {@code fit} after a resume skips that many from its iterator. A data-parallel
     *                        trainer deals every step's batches out of one iterator that every rank reads whole, so
     *                        this counts the iterator's batches, whatever the rank count: the same position on N
     *                        ranks and on M
     * @param examplesInEpoch the examples of those batches, which the resume checks against the batches it skips (a
     *                        different batch size would put it elsewhere in the data); -1 when not recorded (a
     *                        checkpoint written before it was, or a trainer that does not count them)
     * @param ranks           the trainer's ranks (workers, stages) that wrote it
     */
    public record Counters(long step, int epoch, int iteration, long batchesInEpoch, long examplesInEpoch, int ranks) {

        /**
         * Counters without the examples of the epoch's trained batches (-1: not recorded).
         *
         * @param step           the trainer's steps done
         * @param epoch          the model's epoch counter
         * @param iteration      the model's iteration counter
         * @param batchesInEpoch batches of the epoch under way already trained
         * @param ranks          the trainer's ranks that wrote it
         */
        public Counters(long step, int epoch, int iteration, long batchesInEpoch, int ranks) {
            this(step, epoch, iteration, batchesInEpoch, -1, ranks);
        }
    }

    /**
     * A complete checkpoint, as found and verified.
     *
     * @param dir      its directory
     * @param counters what its manifest says
     */
    public record Checkpoint(Path dir, Counters counters) {
    }

    /**
     * A checkpoint directory that failed its verification: never loaded. Its message ends with the fix: an earlier
     * complete checkpoint.
     */
    public static final class TornCheckpointException extends IOException {
        TornCheckpointException(String message) {
            super(message + " (fix: restore an earlier complete checkpoint, or give the root to resumeFrom, which skips"
                    + " torn ones)");
        }
    }

    /** Writes a file's bytes to the path it is given (a temporary name). */
    @FunctionalInterface
    public interface ContentWriter {
        /**
         * Writes the file's whole content to {@code tmp}.
         *
         * @param tmp where to write
         * @throws IOException when it cannot
         */
        void write(Path tmp) throws IOException;
    }

    private CheckpointDirectory() {
    }

    /**
     * The directory of the periodic checkpoint at {@code step} under {@code root}.
     *
     * @param root the run's checkpoint root
     * @param step the steps done
     * @return {@code root/step-<step, 12 digits>}
     */
    public static Path stepDir(Path root, long step) {
        return root.resolve(String.format(java.util.Locale.ROOT, "step-%012d", step));
    }

    /**
     * Writes {@code target} atomically: {@code writer} writes a temporary sibling, which is forced to disk and moved
     * over {@code target} (an atomic rename where the file system has one).
     *
     * @param target the final name
     * @param writer writes the bytes
     * @throws IOException when writing, forcing or renaming fails (the temporary file is deleted)
     */
    public static void writeAtomically(Path target, ContentWriter writer) throws IOException {
        Path tmp = target.resolveSibling(target.getFileName() + ".tmp");
        try {
            writer.write(tmp);
            haltIfInjected(target, tmp);
            force(tmp);
            try {
                Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING);
            }
        } finally {
            Files.deleteIfExists(tmp);
        }
    }

    /** {@link #HALT_WRITING_PROPERTY}: when {@code target} is the file it names, tear {@code tmp} and halt. */
    private static void haltIfInjected(Path target, Path tmp) throws IOException {
        String what = System.getProperty(HALT_WRITING_PROPERTY);
        if (what == null || what.isBlank() || !target.toAbsolutePath().normalize().endsWith(Path.of(what).normalize())) {
            return;
        }
        long size = Files.size(tmp);
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.WRITE)) {
            ch.truncate(size / 2);
            ch.force(true);
        }
        LOG.warn("symmem4j checkpoint: fault injection ({}={}): halting while writing {} ({} of {} bytes written)",
                HALT_WRITING_PROPERTY, what, target, size / 2, size);
        System.out.flush();
        System.err.flush();
        Runtime.getRuntime().halt(137);
    }

    /**
     * Records that the run has done {@code step} steps: writes {@code root/}{@value #PROGRESS} (created with the root
     * when absent; a temporary file renamed over it, not forced: it only informs). The trainers' leader calls it after
     * every step when the run takes periodic checkpoints ({@link CheckpointSchedule#due}); a restarted run reads it
     * ({@link #progress}) before it trains, to say how many steps it redoes.
     *
     * @param root the run's checkpoint root
     * @param step the steps done
     * @throws IOException when the file cannot be written
     */
    public static void recordProgress(Path root, long step) throws IOException {
        Files.createDirectories(root);
        // a name of its own: every tensor-parallel rank's leader records the same step under one root
        Path tmp = Files.createTempFile(root, PROGRESS + "-", ".tmp");
        try {
            Files.writeString(tmp, "step=" + step + "\n", StandardCharsets.ISO_8859_1);
            try {
                Files.move(tmp, root.resolve(PROGRESS), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, root.resolve(PROGRESS), StandardCopyOption.REPLACE_EXISTING);
            }
        } finally {
            Files.deleteIfExists(tmp);
        }
    }

    /**
     * The last step the run under {@code root} recorded as done ({@link #recordProgress}): read before a resumed run
     * trains, the step its previous generation had reached.
     *
     * @param root the run's checkpoint root
     * @return the step, or -1 when nothing was recorded (or the file does not parse)
     */
    public static long progress(Path root) {
        try {
            String text = Files.readString(root.resolve(PROGRESS), StandardCharsets.ISO_8859_1).strip();
            return text.startsWith("step=") ? Long.parseLong(text.substring("step=".length())) : -1;
        } catch (IOException | NumberFormatException e) {
            return -1;
        }
    }

    /**
     * The line a trainer logs when it resumes (or starts over) under {@code root}: from which step, and how many
     * steps the run had done past it (by {@link #progress}), which it now does again.
     *
     * @param root     the run's checkpoint root
     * @param resumed  the checkpoint it resumes from, or null when none is complete (it starts over from step 0)
     * @param progress {@link #progress} read before the resume
     * @return e.g. {@code resuming from step 30 (checkpoint .../step-000000000030); the run had reached step 33 before:
     *         3 steps redone}
     */
    public static String resumeLine(Path root, Checkpoint resumed, long progress) {
        long from = resumed == null ? 0 : resumed.counters().step();
        String where = resumed == null ? "starting over from step 0 (no complete checkpoint under " + root + ")"
                : "resuming from step " + from + " (checkpoint " + resumed.dir() + ")";
        if (progress < 0) {
            return where + "; no earlier progress recorded under " + root + ": 0 steps redone";
        }
        return where + "; the run had reached step " + progress + " before: " + Math.max(0, progress - from)
                + " steps redone";
    }

    /**
     * Forces a file's bytes to the storage device.
     *
     * @param file a regular file
     * @throws IOException when it cannot be opened or forced
     */
    public static void force(Path file) throws IOException {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
            ch.force(true);
        }
    }

    /**
     * Forces a directory's entries (the renames into it) to the storage device, where the platform can (Linux can;
     * where a directory cannot be opened, nothing is done).
     *
     * @param dir a directory
     */
    public static void forceDirectory(Path dir) {
        try (FileChannel ch = FileChannel.open(dir, StandardOpenOption.READ)) {
            ch.force(true);
        } catch (IOException | UnsupportedOperationException e) {
            LOG.debug("symmem4j checkpoint: cannot force directory {} ({})", dir, e.toString());
        }
    }

    /**
     * Makes {@code dir} ready for a new checkpoint's files: created when absent, its manifest (of an earlier
     * checkpoint written there) deleted first, so the directory is torn until {@link #writeManifest} completes it.
     *
     * @param dir the checkpoint directory
     * @throws IOException when it cannot be created or the manifest deleted
     */
    public static void begin(Path dir) throws IOException {
        Files.createDirectories(dir);
        if (Files.deleteIfExists(dir.resolve(MANIFEST))) {
            forceDirectory(dir);
        }
    }

    /**
     * Completes a checkpoint: lists every file of {@code dir} (temporary files and the manifest excepted), with its
     * size and CRC-32C, writes the manifest atomically, last, and forces the directory.
     *
     * @param dir      the checkpoint directory, every file written and forced
     * @param counters where the checkpoint stands
     * @throws IOException when a file cannot be read or the manifest written
     */
    public static void writeManifest(Path dir, Counters counters) throws IOException {
        forceDirectory(dir); // the files' renames are durable before the manifest names them
        StringBuilder text = new StringBuilder();
        text.append("format=").append(FORMAT).append('\n');
        text.append("step=").append(counters.step()).append('\n');
        text.append("epoch=").append(counters.epoch()).append('\n');
        text.append("iteration=").append(counters.iteration()).append('\n');
        text.append("batchesInEpoch=").append(counters.batchesInEpoch()).append('\n');
        if (counters.examplesInEpoch() >= 0) {
            text.append("examplesInEpoch=").append(counters.examplesInEpoch()).append('\n');
        }
        text.append("ranks=").append(counters.ranks()).append('\n');
        for (Path f : files(dir)) {
            text.append(FILE_KEY).append(f.getFileName()).append('=').append(Files.size(f)).append(' ')
                    .append(Long.toHexString(crc32c(f))).append('\n');
        }
        byte[] bytes = text.toString().getBytes(StandardCharsets.ISO_8859_1);
        writeAtomically(dir.resolve(MANIFEST), tmp -> Files.write(tmp, bytes));
        forceDirectory(dir);
    }

    /**
     * The rank count (shard files) a checkpoint's manifest names, read without verifying its files (for a trainer
     * that reads the checkpoint in the cut it was saved in; the restore verifies it).
     *
     * @param dir a checkpoint directory
     * @return its manifest's {@code ranks}, or -1 when it has no readable manifest
     */
    public static int savedRanks(Path dir) {
        Properties p = new Properties();
        try (Reader in = Files.newBufferedReader(dir.resolve(MANIFEST), StandardCharsets.ISO_8859_1)) {
            p.load(in);
            return Integer.parseInt(p.getProperty("ranks", "-1").trim());
        } catch (IOException | RuntimeException e) {
            return -1; // no manifest, or a torn one: the restore's own verification says what is wrong
        }
    }

    /**
     * Checks {@code dir} against its manifest: every file it names exists with its size and CRC-32C (a file it does
     * not name is not part of the checkpoint, and nothing reads it).
     *
     * @param dir a checkpoint directory
     * @return what its manifest says
     * @throws TornCheckpointException when the manifest is missing or unreadable, or a file does not match it
     * @throws IOException             when a file cannot be read
     */
    public static Counters verify(Path dir) throws IOException {
        Path manifest = dir.resolve(MANIFEST);
        Properties p = new Properties();
        try (Reader in = Files.newBufferedReader(manifest, StandardCharsets.ISO_8859_1)) {
            p.load(in);
        } catch (NoSuchFileException e) {
            throw new TornCheckpointException("checkpoint " + dir + " is torn: manifest=" + MANIFEST
                    + " missing (its write did not complete); fix: restore the newest complete checkpoint with"
                    + " restoreLatest(root), which skips torn ones, or pass an earlier step-<n> directory");
        }
        if (!FORMAT.equals(p.getProperty("format"))) {
            throw new TornCheckpointException("checkpoint " + dir + " is torn: format=" + p.getProperty("format")
                    + ", expected format=" + FORMAT + "; fix: restore the newest complete checkpoint with"
                    + " restoreLatest(root), which skips torn ones, or pass an earlier step-<n> directory");
        }
        Counters counters;
        try {
            counters = new Counters(Long.parseLong(p.getProperty("step")), Integer.parseInt(p.getProperty("epoch")),
                    Integer.parseInt(p.getProperty("iteration")), Long.parseLong(p.getProperty("batchesInEpoch")),
                    Long.parseLong(p.getProperty("examplesInEpoch", "-1")), Integer.parseInt(p.getProperty("ranks")));
        } catch (RuntimeException e) {
            throw new TornCheckpointException("checkpoint " + dir + " is torn: its manifest's counters do not parse ("
                    + e + "); fix: restore the newest complete checkpoint with restoreLatest(root), which skips torn"
                    + " ones, or pass an earlier step-<n> directory");
        }
        Map<String, String> listed = new TreeMap<>();
        for (String key : p.stringPropertyNames()) {
            if (key.startsWith(FILE_KEY)) {
                listed.put(key.substring(FILE_KEY.length()), p.getProperty(key));
            }
        }
        if (listed.isEmpty()) {
            throw new TornCheckpointException("checkpoint " + dir + " is torn: its manifest lists no file; fix: restore"
                    + " the newest complete checkpoint with restoreLatest(root), which skips torn ones, or pass an"
                    + " earlier step-<n> directory");
        }
        for (Map.Entry<String, String> e : listed.entrySet()) {
            Path f = dir.resolve(e.getKey());
            if (!Files.isRegularFile(f)) {
                throw new TornCheckpointException("checkpoint " + dir + " is torn: file=" + e.getKey()
                        + " missing, manifest says " + e.getValue() + "; fix: restore the newest complete checkpoint"
                        + " with restoreLatest(root), which skips torn ones, or pass an earlier step-<n> directory");
            }
            String found = Files.size(f) + " " + Long.toHexString(crc32c(f));
            if (!found.equals(e.getValue())) {
                throw new TornCheckpointException("checkpoint " + dir + " is torn: file=" + e.getKey() + " size and crc32c="
                        + found + ", manifest says " + e.getValue() + "; fix: restore the newest complete checkpoint"
                        + " with restoreLatest(root), which skips torn ones, or pass an earlier step-<n> directory");
            }
        }
        return counters;
    }

    /**
     * The newest complete checkpoint under {@code root}: the {@code step-<n>} directories from the highest step down,
     * each verified ({@link #verify}); a torn one is skipped with a warning naming what is wrong.
     *
     * @param root the run's checkpoint root; absent means none
     * @return the newest complete checkpoint, or empty when there is none
     * @throws IOException              when the root cannot be listed
     * @throws IllegalArgumentException when the root holds a tensor-parallel run's checkpoints ({@link CheckpointLayout})
     */
    public static Optional<Checkpoint> latestComplete(Path root) throws IOException {
        CheckpointLayout.refuseTensorParallelRoot(root);
        for (Path dir : stepDirsNewestFirst(root)) {
            try {
                return Optional.of(new Checkpoint(dir, verify(dir)));
            } catch (IOException e) {
                LOG.warn("symmem4j checkpoint: skipping {}: {}", dir, e.getMessage());
            }
        }
        return Optional.empty();
    }

    /**
     * Keeps the {@code keep} newest complete checkpoints under {@code root} and deletes every other {@code step-<n>}
     * directory older than the newest complete one (complete or torn); torn ones newer than it are left.
     *
     * @param root the run's checkpoint root
     * @param keep complete checkpoints kept, at least 1
     * @throws IOException when a directory cannot be listed or deleted
     */
    public static void prune(Path root, int keep) throws IOException {
        int complete = 0;
        for (Path dir : stepDirsNewestFirst(root)) {
            boolean ok;
            try {
                verify(dir);
                ok = true;
            } catch (IOException e) {
                ok = false;
            }
            if (ok && complete < keep) {
                complete++;
            } else if (complete > 0) {
                deleteTree(dir);
            }
        }
    }

    static List<Path> stepDirsNewestFirst(Path root) throws IOException {
        if (!Files.isDirectory(root)) {
            return List.of();
        }
        try (Stream<Path> listing = Files.list(root)) {
            return listing.filter(d -> Files.isDirectory(d) && STEP_DIR.matcher(d.getFileName().toString()).matches())
                    .sorted(Comparator.comparing((Path d) -> d.getFileName().toString()).reversed()).toList();
        }
    }

    private static List<Path> files(Path dir) throws IOException {
        try (Stream<Path> listing = Files.list(dir)) {
            return listing.filter(f -> Files.isRegularFile(f) && !f.getFileName().toString().equals(MANIFEST)
                    && !f.getFileName().toString().endsWith(".tmp"))
                    .sorted(Comparator.comparing(f -> f.getFileName().toString())).toList();
        }
    }

    private static long crc32c(Path file) throws IOException {
        CRC32C crc = new CRC32C();
        try (InputStream in = Files.newInputStream(file)) {
            byte[] buf = new byte[1 << 16];
            int n;
            while ((n = in.read(buf)) > 0) {
                crc.update(buf, 0, n);
            }
        }
        return crc.getValue();
    }

    static void deleteTree(Path dir) throws IOException {
        try (Stream<Path> walk = Files.walk(dir)) {
            for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }

    /**
     * Reads and drops the first {@code n} items of {@code iterator} (a {@code DataSetIterator}'s batches), for a caller
     * that positions its own iterator after {@link #latestComplete}; the trainers' {@code resumeFrom} does it itself.
     *
     * @param iterator the batches
     * @param n        how many to skip ({@link Counters#batchesInEpoch()})
     * @return how many were skipped: {@code n}, or fewer when the iterator ended first
     */
    public static long skip(java.util.Iterator<?> iterator, long n) {
        long skipped = 0;
        while (skipped < n && iterator.hasNext()) {
            iterator.next();
            skipped++;
        }
        return skipped;
    }

    /**
     * {@link #latestComplete}, agreed across a group's ranks: every rank finds its own, and all must have found the
     * same step (one file system they share, or equal copies); in thread mode ({@code group} null) just this
     * process's. The leader (rank 0, or the one process) logs where the run resumes and how many steps it redoes
     * ({@link #resumeLine}, from the {@link #progress} the run recorded before).
     *
     * @param root      the run's checkpoint root
     * @param group     the trainer's group, or null in thread mode
     * @param tagPrefix makes the exchange's key unique to the trainer
     * @return the newest complete checkpoint, or empty when there is none
     * @throws IOException              when the root cannot be listed, in thread mode
     * @throws IllegalArgumentException on every rank, when one or more found a tensor-parallel run's root (naming them)
     * @throws IllegalStateException    when ranks found different checkpoints (naming each rank's), or on every rank
     *                                  when one or more could not list the root (naming them)
     */
    public static Optional<Checkpoint> latestComplete(Path root, org.symmem4j.parallel.Group group, String tagPrefix)
            throws IOException {
        return agreed(root, group, tagPrefix, () -> latestComplete(root));
    }

    /**
     * The error every rank throws when one or more failed to find its newest checkpoint: a rank's own when every rank
     * failed alike (a failure the ranks agreed on already, as {@link CheckpointLayout}'s), else one naming the ranks
     * that failed and what each found, the same on every rank: an {@link IllegalArgumentException} when every failure
     * was one (a root of another kind of run), else an {@link IllegalStateException}.
     */
    private static RuntimeException failedTogether(Path root, List<String> all, Exception mine) {
        if (mine instanceof RuntimeException own && all.stream().distinct().count() == 1) {
            return own; // every rank the same failure, already agreed: its message as it is
        }
        List<Integer> failed = new java.util.ArrayList<>();
        StringBuilder found = new StringBuilder();
        boolean refusedOnly = true;
        for (int r = 0; r < all.size(); r++) {
            boolean refused = all.get(r).startsWith(REFUSED);
            if (refused || all.get(r).startsWith(FAILED)) {
                refusedOnly &= refused;
                failed.add(r);
                found.append(found.isEmpty() ? "" : "; ").append("rank ").append(r).append(" found: ")
                        .append(all.get(r).substring(refused ? REFUSED.length() : FAILED.length()));
            }
        }
        String message = "resume from checkpoint root=" + root + " refused on every rank (" + all.size() + "): rank(s) "
                + failed + " could not find a checkpoint to resume from, expected every rank to; nothing was read into"
                + " any rank's model. " + found + " (fix: what rank " + failed.getFirst() + "'s message says, then"
                + " resume again on every rank)";
        return refusedOnly ? new IllegalArgumentException(message, mine) : new IllegalStateException(message, mine);
    }

    /** What a rank that could not find its newest checkpoint contributes to {@link #agreed}'s exchange. */
    private static final String REFUSED = "refused: ";
    private static final String FAILED = "failed: ";

    /** Finds this rank's newest complete checkpoint ({@link #agreed}). */
    @FunctionalInterface
    interface Finder {
        Optional<Checkpoint> find() throws IOException;
    }

    /**
     * {@link #latestComplete(Path, org.symmem4j.parallel.Group, String)} with another way of finding this rank's
     * newest complete checkpoint ({@link CheckpointLayout}'s, over every tensor-parallel rank's directory).
     */
    static Optional<Checkpoint> agreed(Path root, org.symmem4j.parallel.Group group, String tagPrefix, Finder finder)
            throws IOException {
        boolean leader = group == null || group.rank() == 0; // it records the progress, and says what was redone
        long progress = leader ? progress(root) : -1; // read before this run records any
        Optional<Checkpoint> mine = Optional.empty();
        Exception failure = null;
        try {
            mine = finder.find();
        } catch (IOException | RuntimeException e) {
            if (group == null) {
                throw e;
            }
            failure = e; // agreed below: the other ranks would otherwise wait for this one in the exchange
        }
        if (leader && failure == null && (progress >= 0 || mine.isPresent())) {
            LOG.info("symmem4j checkpoint: {}", resumeLine(root, mine.orElse(null), progress));
        }
        if (group == null) {
            return mine;
        }
        String step = failure != null ? (failure instanceof IllegalArgumentException ? REFUSED : FAILED)
                + failure.getMessage() : mine.map(c -> Long.toString(c.counters().step())).orElse("none");
        List<String> all = RankAgreement.allGather(group, tagPrefix + "checkpoint-latest", step);
        if (all.stream().anyMatch(s -> s.startsWith(REFUSED) || s.startsWith(FAILED))) {
            throw failedTogether(root, all, failure);
        }
        if (all.stream().distinct().count() != 1) {
            throw new IllegalStateException("ranks found different newest complete checkpoints under root=" + root
                    + ": steps by rank=" + all + " (every rank must see the same checkpoint directory: a file system"
                    + " they share; fix: put the checkpoint root on a shared file system, or give every rank"
                    + " the same copy)");
        }
        return mine;
    }
}
