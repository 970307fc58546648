package org.symmem4j.dl4j.train;

import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.parallel.Group;

/**
 * Where a trainer's checkpoints go under a root, and which of them it may load: a plain run's straight under the root
 * ({@link CheckpointDirectory}'s {@code step-<n>} directories), a tensor-parallel run's apart per tensor-parallel rank.
 *
 * <pre>
 * root/
 *   progress                          the last step done (every tp rank's leader records the same)
 *   tp-0-of-2/step-000000000020/      tp rank 0's shard: CheckpointDirectory's format, + tensor-parallel.properties
 *   tp-0-of-2/step-000000000030/
 *   tp-1-of-2/step-000000000020/      tp rank 1's shard
 *   tp-1-of-2/step-000000000030/      (torn: its manifest missing)
 * </pre>
 *
 * <p>Each tensor-parallel rank's checkpoint is written by its own data-parallel group, exactly as a plain run's (the
 * group's rank 0 writes the model and the manifest, every rank its ZeRO shard), with {@value #MARKER} (the rank and the
 * degree) among the files the manifest lists. A step is loadable only when it is complete under every rank's
 * directory: {@link #latestComplete} picks the newest such step, so a step torn on one rank is skipped by all (above,
 * step 20), and {@link #prune} keeps, in each rank's directory, the newest step complete on every rank until a newer
 * one is. A root may hold several degrees' directories (a run resumed on another degree writes its own beside the old
 * ones): {@link #latestComplete} takes the newest step complete on every rank of any degree, and a step of another
 * degree is found with its siblings by {@link #otherDegreeDirs}, for the trainer to re-slice onto this one. A root
 * written by a plain run is refused, as is a checkpoint directory of another rank's shard of this degree
 * ({@link #checkShard}), before anything is loaded. Every rank of the trainer, every tp rank of every
 * data-parallel replica, {@linkplain #agree agrees} on these checks' outcome, and on the step to load, before any of
 * them reads or writes: a mismatch one rank sees is refused by all.
 */
public final class CheckpointLayout {

    /** The file in a tensor-parallel rank's checkpoint that says whose shard it holds ({@code rank=R}, {@code size=S}). */
    public static final String MARKER = "tensor-parallel.properties";
    private static final Pattern TP_DIR = Pattern.compile("tp-(\\d+)-of-(\\d+)");
    private static final Pattern STEP_DIR = Pattern.compile("step-\\d{12}");
    private static final Logger LOG = LoggerFactory.getLogger(CheckpointLayout.class);
    private static final CheckpointLayout PLAIN = new CheckpointLayout(0, 0, null, false);
    /** A tensor-parallel network's whose layers are not attached to their group ({@link #forBuild}). */
    private static final CheckpointLayout UNATTACHED = new CheckpointLayout(0, 0, null, true);
    /** The prefix of the tensor-parallel group's exchanges ({@link #agree}). */
    private static final String TAG = "symmem4j-tp-checkpoint-";
    /** What a rank contributes to an exchange when all fit ({@code ok:<value>}), or when it found a mismatch. */
    private static final String OK = "ok:";
    private static final String MISMATCH = "mismatch:";
    private static final String FAILED = "failed:";
    /** How {@link #exchange}'s refusal says what was found, what was expected, and what each rank found. */
    private static final String[] CHECKPOINT = {" found a checkpoint that does not fit", "'s to fit", " found: "};
    private static final String[] BUILD = {" refused it", " to accept it", " refused: "};

    /** This rank in the tensor-parallel group, 0 when plain. */
    private final int rank;
    /** The tensor-parallel degree, 0 when plain. */
    private final int size;
    /** The tensor-parallel group, over which the ranks agree ({@link #agree}); null when plain or not known. */
    private final Group group;
    /** A tensor-parallel network not attached to its group: it agrees over the trainer's group alone ({@link #forBuild}). */
    private final boolean unattached;

    private CheckpointLayout(int rank, int size, Group group, boolean unattached) {
        this.rank = rank;
        this.size = size;
        this.group = group;
        this.unattached = unattached;
    }

    /** {@return the layout of a run that is not tensor-parallel: step directories straight under the root} */
    public static CheckpointLayout plain() {
        return PLAIN;
    }

    /**
     * The layout of tensor-parallel rank {@code rank} of {@code size}.
     *
     * @param rank 0 .. size-1
     * @param size the tensor-parallel degree, at least 1
     * @return its layout
     * @throws IllegalArgumentException when {@code rank} is not in {@code [0, size)}
     */
    public static CheckpointLayout tensorParallel(int rank, int size) {
        return tensorParallel(rank, size, null);
    }

    /**
     * The layout of tensor-parallel rank {@code rank} of {@code size}, whose checks {@linkplain #agree agree} over
     * {@code group}.
     *
     * @param rank  0 .. size-1
     * @param size  the tensor-parallel degree, at least 1
     * @param group the tensor-parallel group, or null (then every rank checks alone)
     * @return its layout
     * @throws IllegalArgumentException when {@code rank} is not in {@code [0, size)}, or not the group's rank and size
     */
    public static CheckpointLayout tensorParallel(int rank, int size, Group group) {
        if (size < 1 || rank < 0 || rank >= size) {
            throw new IllegalArgumentException("tensor-parallel rank=" + rank + " size=" + size + ": expected"
                    + " 0 <= rank < size (fix: pass the tensor-parallel group's rank and size)");
        }
        if (group != null && (group.rank() != rank || group.worldSize() != size)) {
            throw new IllegalArgumentException("tensor-parallel rank=" + rank + " size=" + size + " with a group of"
                    + " rank=" + group.rank() + " size=" + group.worldSize() + ": expected the group's own rank and size"
                    + " (fix: pass the tensor-parallel group's rank and size with it)");
        }
        return new CheckpointLayout(rank, size, group, false);
    }

    /**
     * The layout of a model's checkpoints: a tensor-parallel network's ({@link TensorParallel#shard}) by the rank and
     * size of the communicator it is attached to, any other model's plain.
     *
     * @param model the trainer's model
     * @return its layout
     * @throws IllegalStateException when it is tensor-parallel but not attached (its rank is unknown)
     */
    public static CheckpointLayout of(org.deeplearning4j.nn.api.Model model) {
        TensorParallel.Placement p = TensorParallel.placement(model);
        return p == null ? PLAIN : tensorParallel(p.rank(), p.size(), p.group());
    }

    /**
     * The layout a trainer's {@code build()} agrees over ({@link #agreeOnBuild}): {@link #of}, or for a tensor-parallel
     * network not attached to its group (which {@code build()} refuses) one that knows no tensor-parallel group. That
     * rank takes part in the agreement's data-parallel round only; its tensor-parallel peers then wait for it in the
     * tensor-parallel round, which it cannot join, so once it has thrown the agreed refusal it aborts the trainer's
     * group: the abort crosses to every group it shares with them (a sub-group's abort reaches its parent and the
     * parent's other sub-groups: {@code Group#split}), and they fail at once instead of at their timeout.
     *
     * @param model the trainer's model
     * @return its layout
     */
    public static CheckpointLayout forBuild(org.deeplearning4j.nn.api.Model model) {
        try {
            return of(model);
        } catch (IllegalStateException notAttached) {
            return UNATTACHED;
        }
    }

    /** {@return whether this is a tensor-parallel rank's layout} */
    public boolean isTensorParallel() {
        return size > 0;
    }

    /**
     * The directory that holds this rank's checkpoints under {@code root}: the root itself when plain, else
     * {@code root/tp-R-of-S}.
     *
     * @param root the run's checkpoint root, or a directory given to {@code saveCheckpoint}
     * @return where this rank's files go
     */
    public Path ownRoot(Path root) {
        return size == 0 ? root : root.resolve(tpDirName(rank, size));
    }

    /**
     * The periodic checkpoint of {@code step}: {@code ownRoot(root)/step-<n>}.
     *
     * @param root the run's checkpoint root
     * @param step the steps done
     * @return its directory
     */
    public Path stepDir(Path root, long step) {
        return CheckpointDirectory.stepDir(ownRoot(root), step);
    }

    /**
     * The checkpoint directory a restore of {@code dir} reads: when {@code dir} holds tensor-parallel ranks'
     * directories (a tensor-parallel {@code saveCheckpoint}'s), this rank's, after checking the degree; else
     * {@code dir} itself ({@link #checkShard} then checks whose shard it is).
     *
     * @param dir a directory given to {@code restoreCheckpoint}
     * @return the directory to read
     * @throws IOException              when it cannot be listed
     * @throws IllegalArgumentException when it holds another degree's ranks, or ranks' directories for a plain run
     */
    public Path restoreDir(Path dir) throws IOException {
        if (size == 0) {
            refuseTensorParallelRoot(dir);
            return dir;
        }
        List<String> tp = tpDirs(dir);
        if (tp.isEmpty()) {
            return dir;
        }
        checkDegree(dir);
        if (tp.stream().noneMatch(d -> degreeOf(d) == size)) {
            throw new IllegalArgumentException("checkpoint " + dir + " holds tensor-parallel degree "
                    + degreeOf(tp.getFirst()) + "'s shards " + tp + ": expected this run's degree " + size + "'s "
                    + tpDirName(rank, size) + " (fix: restore it with the wrapper's restoreCheckpoint or resumeFrom,"
                    + " which re-slices another degree's shards onto this one)");
        }
        return ownRoot(dir);
    }

    /**
     * The checkpoint directories of every rank of another tensor-parallel degree that a restore of {@code dir} re-slices
     * onto this rank ({@code TensorParallelReslice}), in their rank order, or an empty list when {@code dir} is this
     * degree's (or a plain run's) and restores as it is. {@code dir} is another degree's when it holds only that
     * degree's {@code tp-R-of-T} directories (a {@code saveCheckpoint} directory; this degree's, when present, wins), or
     * when its {@value #MARKER} names degree {@code T}: then the other ranks' directories are its siblings
     * ({@code ../tp-R-of-T/<its name>}, as {@link #latestComplete} finds them, or {@code ../tp-R-of-T}). Agreed by every
     * rank of the trainer as {@link #checkedRestoreDir} is.
     *
     * @param dir     a directory given to {@code restoreCheckpoint}
     * @param trainer the trainer's (data-parallel) group, or null in thread mode
     * @return the other degree's directories, rank 0 first; empty when {@code dir} is not another degree's
     * @throws IOException              when {@code dir} cannot be listed or its marker read, with no group to agree over
     * @throws IllegalArgumentException when it holds several other degrees and not this one, or another degree's
     *                                  shard whose siblings are missing; on every rank when one found it
     */
    public List<Path> otherDegreeDirs(Path dir, Group trainer) throws IOException {
        if (size == 0) {
            return List.of(); // a plain run's every rank: nothing to agree on (checkedRestoreDir refuses a tp root)
        }
        List<Path> dirs = List.of();
        Exception mismatch = null;
        try {
            dirs = otherDegreeDirs(dir);
        } catch (IOException | IllegalArgumentException e) {
            mismatch = e;
        }
        List<String> found = exchange("degree", "checkpoint restore", mismatch, Integer.toString(dirs.size()), trainer,
                CHECKPOINT);
        if (found.stream().distinct().count() != 1) {
            throw new IllegalStateException("ranks found different tensor-parallel degrees in checkpoint " + dir + ": "
                    + "shards by " + ranksOf(trainer) + "=" + found + " (0: this run's own degree), expected one (fix: put"
                    + " the checkpoint on a file system every rank shares, then restore again)");
        }
        return dirs;
    }

    private List<Path> otherDegreeDirs(Path dir) throws IOException {
        List<String> tp = tpDirs(dir);
        if (!tp.isEmpty()) {
            if (tp.stream().anyMatch(d -> degreeOf(d) == size)) {
                return List.of();
            }
            List<Integer> degrees = tp.stream().map(CheckpointLayout::degreeOf).distinct().toList();
            if (degrees.size() > 1) {
                throw new IllegalArgumentException("checkpoint " + dir + " holds shards of tensor-parallel degrees "
                        + degrees + " " + tp + " and none of this run's degree " + size + ": expected one degree's"
                        + " (fix: give restoreCheckpoint one save's directory, or resumeFrom the run's root, which takes"
                        + " the newest step)");
            }
            return siblings(dir, degrees.getFirst(), null, dir);
        }
        Properties p = new Properties();
        try (Reader in = Files.newBufferedReader(dir.resolve(MARKER), StandardCharsets.ISO_8859_1)) {
            p.load(in);
        } catch (NoSuchFileException e) {
            return List.of(); // not a tensor-parallel shard: checkShard refuses it
        }
        int degree = Integer.parseInt(p.getProperty("size", "0"));
        if (degree == size || degree < 1) {
            return List.of();
        }
        Path parent = dir.getParent();
        String own = "tp-" + p.getProperty("rank") + "-of-" + degree;
        if (dir.getFileName().toString().equals(own) && parent != null) {
            return siblings(parent, degree, null, dir); // saveCheckpoint's dir/tp-R-of-T
        }
        if (parent != null && parent.getFileName().toString().equals(own) && parent.getParent() != null) {
            return siblings(parent.getParent(), degree, dir.getFileName().toString(), dir); // root/tp-R-of-T/step-<n>
        }
        throw new IllegalArgumentException("checkpoint " + dir + " holds tensor-parallel rank=" + p.getProperty("rank")
                + " size=" + degree + "'s shard, not this run's degree " + size + ", and is not in a " + own + " directory"
                + " beside the other ranks' (expected root/tp-R-of-" + degree + "/step-<n> or dir/tp-R-of-" + degree
                + ", whose shards are re-sliced for degree " + size + "; fix: restore the directory that holds every"
                + " rank's tp-R-of-" + degree + ", or resumeFrom the run's root)");
    }

    /** Every rank's directory of degree {@code degree} under {@code parent} (then {@code step} in each), all present. */
    private static List<Path> siblings(Path parent, int degree, String step, Path given) {
        List<Path> dirs = new ArrayList<>();
        List<String> missing = new ArrayList<>();
        for (int r = 0; r < degree; r++) {
            Path d = parent.resolve(tpDirName(r, degree));
            d = step == null ? d : d.resolve(step);
            if (!Files.isDirectory(d)) {
                missing.add(parent.relativize(d).toString());
            }
            dirs.add(d);
        }
        if (!missing.isEmpty()) {
            throw new IllegalArgumentException("checkpoint " + given + " is tensor-parallel degree " + degree + "'s, whose"
                    + " shards are re-sliced for this run's degree; missing under " + parent + ": " + missing
                    + " (expected every rank's shard of that save; fix: restore a complete checkpoint, or resumeFrom the"
                    + " run's root, which takes the newest step complete on every rank)");
        }
        return dirs;
    }

    /** {@return this rank in the tensor-parallel group (0 when plain)} */
    public int rank() {
        return rank;
    }

    /** {@return the tensor-parallel degree (0 when plain)} */
    public int size() {
        return size;
    }

    /**
     * {@link #restoreDir} then {@link #checkShard}, agreed on by every rank that takes part in the restore
     * ({@link #agree}: every tp rank of every data-parallel replica): when any rank's checks fail, every rank refuses
     * with the same message before anything is read, so none waits for the others.
     *
     * @param dir     a directory given to {@code restoreCheckpoint}
     * @param trainer the trainer's (data-parallel) group, or null in thread mode
     * @return this rank's directory to read, checked
     * @throws IOException              when this rank could not list or read its directory and there is no group to
     *                                  agree over
     * @throws IllegalArgumentException when a rank's directory holds another degree's or rank's shard
     * @throws IllegalStateException    when a rank could not list or read its directory
     */
    public Path checkedRestoreDir(Path dir, Group trainer) throws IOException {
        Path own = dir;
        Exception mismatch = null;
        try {
            own = restoreDir(dir); // a tensor-parallel rank's own tp-R-of-S, the degree checked
            checkShard(own); // before anything is read into the model
        } catch (IOException | IllegalArgumentException e) {
            mismatch = e;
        }
        agree("checkpoint restore", mismatch, trainer); // each rank's own directory: the failing ranks name theirs
        return own;
    }

    /**
     * A tensor-parallel rank's leader's first step of a checkpoint, once the save's checks passed:
     * {@link CheckpointDirectory#begin} (the directory torn from here), then {@value #MARKER} (atomically), which the
     * manifest written last lists with the other files. A plain run's: nothing (its writer begins the directory).
     *
     * @param dir the checkpoint directory
     * @throws IOException when it cannot be created or the marker written
     */
    public void begin(Path dir) throws IOException {
        if (size > 0) {
            CheckpointDirectory.begin(dir);
            byte[] text = ("rank=" + rank + "\nsize=" + size + "\n").getBytes(StandardCharsets.ISO_8859_1);
            CheckpointDirectory.writeAtomically(dir.resolve(MARKER), tmp -> Files.write(tmp, text));
        }
    }

    /**
     * Refuses, before anything is read into a model, a checkpoint directory that holds another shard than this rank's:
     * another tensor-parallel rank's or degree's, a tensor-parallel shard for a plain run, or a plain (whole) network
     * for a tensor-parallel rank.
     *
     * @param dir the checkpoint directory about to be restored
     * @throws IOException              when its marker cannot be read
     * @throws IllegalArgumentException when it holds another shard
     */
    public void checkShard(Path dir) throws IOException {
        Properties p = new Properties();
        try (Reader in = Files.newBufferedReader(dir.resolve(MARKER), StandardCharsets.ISO_8859_1)) {
            p.load(in);
        } catch (NoSuchFileException e) {
            if (size > 0) {
                throw new IllegalArgumentException("checkpoint " + dir + " holds no " + MARKER + ": expected tensor-parallel"
                        + " rank=" + rank + " size=" + size + "'s shard, found a checkpoint of a network that is not"
                        + " tensor-parallel (fix: restore it into the unsharded network, then shard it with"
                        + " TensorParallel.shard(restored, tpRank, tpSize, columnLayers); or give this rank's directory,"
                        + " " + tpDirName(rank, size) + ")");
            }
            return;
        }
        String found = "rank=" + p.getProperty("rank") + " size=" + p.getProperty("size");
        if (size == 0) {
            throw new IllegalArgumentException("checkpoint " + dir + " holds tensor-parallel " + found + "'s shard:"
                    + " expected a whole network, this one is not tensor-parallel (fix: resume it on a tensor-parallel"
                    + " run of size=" + p.getProperty("size") + ", or gather the shards there with TensorParallel.gather"
                    + " and save the whole network)");
        }
        if (!found.equals("rank=" + rank + " size=" + size)) {
            throw new IllegalArgumentException("checkpoint " + dir + " holds tensor-parallel " + found + "'s shard:"
                    + " expected rank=" + rank + " size=" + size + "'s, this rank's (fix: restore "
                    + tpDirName(rank, size) + " on this rank: give restoreCheckpoint the directory that holds every"
                    + " rank's tp-R-of-S, or resumeFrom the run's root)");
        }
    }

    /**
     * The newest checkpoint complete under every tensor-parallel rank's directory (a plain run: under the root), agreed
     * across every rank of the trainer (every tp rank of every replica of {@code group}) as
     * {@link CheckpointDirectory#latestComplete(Path, Group, String)} does; a step torn under one rank's directory is
     * skipped, with a log line naming it, for every rank.
     *
     * @param root      the run's checkpoint root
     * @param group     the trainer's (data-parallel) group, or null in thread mode
     * @param tagPrefix makes the exchange's key unique to the trainer
     * @return this rank's directory of that step (of another degree's step, that degree's rank 0's directory: a restore
     *         re-slices it, {@link #otherDegreeDirs}), with its counters; empty when no step is complete on every rank
     * @throws IOException              when a directory cannot be listed (and there is no group to agree over)
     * @throws IllegalArgumentException when the root was written by a plain run for a tensor-parallel one (or the
     *                                  reverse); on every rank when one found it
     * @throws IllegalStateException    when ranks found different newest steps, or one failed to read its directory
     */
    public Optional<CheckpointDirectory.Checkpoint> latestComplete(Path root, Group group, String tagPrefix)
            throws IOException {
        return CheckpointDirectory.agreed(root, group, tagPrefix, () -> {
            Optional<CheckpointDirectory.Checkpoint> mine = Optional.empty();
            Exception failure = null;
            try {
                if (size == 0) {
                    mine = CheckpointDirectory.latestComplete(root);
                } else {
                    checkDegree(root);
                    mine = newestOfEveryDegree(root);
                }
            } catch (IOException | IllegalArgumentException e) {
                failure = e;
            }
            // every rank the same verdict and the same step, before any rank reads a byte of one
            List<String> steps = exchange("latest", "resume from checkpoint root=" + root, failure,
                    mine.map(c -> c.counters().step() + degreeSuffix(c.dir())).orElse("none"), group, CHECKPOINT);
            if (steps.stream().distinct().count() != 1) {
                throw new IllegalStateException("ranks found different newest steps complete on every tensor-parallel"
                        + " rank under root=" + root + ": steps by " + ranksOf(group) + "=" + steps + ", expected one"
                        + " (each rank lists every tp rank's directory: a file system that shows them otherwise to some"
                        + " ranks; fix: put the checkpoint root on a file system every rank shares, then resume again)");
            }
            return mine;
        });
    }

    /**
     * Collective over every rank of the trainer: the trainer's data-parallel group and then the tensor-parallel group
     * (when this is a tensor-parallel rank's layout), so every tp rank of every data-parallel replica learns what
     * every other found at this point of a checkpoint's save or restore, before any of them reads or writes a byte of
     * it. A mismatch that only some ranks see (another rank's shard in this rank's directory, a root a rank's file
     * system shows otherwise, a replica given another directory) is refused on every rank with the same error, naming
     * the ranks that found it and what each found, rather than on those ranks alone while the others go on into the
     * next collective and wait for them until their timeout. When every rank found the same (one message), or there is
     * no group to agree over (thread mode and not tensor-parallel, or groups of one), this rank's own failure is thrown
     * as it is.
     *
     * @param what    the operation, for the message ({@code "checkpoint restore"})
     * @param failure what this rank found ({@link IllegalArgumentException} for a mismatch), or null when all fits
     * @param trainer the trainer's (data-parallel) group, or null in thread mode
     * @throws IOException              this rank's own, when there is no group to agree over
     * @throws IllegalArgumentException on every rank, when one or more found a mismatch (and none failed otherwise)
     * @throws IllegalStateException    on every rank, when one or more failed otherwise (a file that could not be
     *                                  read)
     */
    public void agree(String what, Exception failure, Group trainer) throws IOException {
        exchange("agree", what, failure, "", trainer, CHECKPOINT);
    }

    /**
     * {@link #agreeOnBuild} without descriptions, for a check made again later (each {@code fit()}'s start): what
     * this rank refused is learned by every rank of the trainer before any data moves.
     *
     * @param what    the operation, for the message ({@code "fit()"})
     * @param refusal what this rank refused, or null when it accepted everything
     * @param trainer the trainer's (data-parallel) group, or null in thread mode
     * @throws IllegalArgumentException on every rank, when one or more refused (and none failed otherwise)
     * @throws IllegalStateException    on every rank, when one or more failed otherwise
     */
    public void agreeRefusal(String what, RuntimeException refusal, Group trainer) {
        agreeOnBuild(what, refusal, "", trainer);
    }

    /**
     * {@link #agree}'s exchange for a trainer's {@code build()}: what this rank's checks refused (its settings or model,
     * a checkpoint root), learned by every rank of the trainer before any of them allocates, writes or joins a
     * collective of training, so a refusal only some ranks reach (settings given to one rank only, a file system one
     * rank sees otherwise) is thrown on every rank with the same message naming them and what each refused, rather than
     * on those alone while the others wait for them in the trainer's first collective until their timeout. When no rank
     * refused, every rank's {@code description} (of its settings, for the caller to compare) comes back, from the same
     * exchange.
     *
     * <p>The data-parallel round goes first, so a tensor-parallel rank whose network is not attached ({@link #forBuild})
     * takes part in it: the replicas of its tp rank learn its refusal there and tell their own replicas in the
     * tensor-parallel round; its own replica's other tp ranks, who wait for it in that round, fail at once on its
     * abort (in one JVM; across processes when its process exits, else at the group's timeout), with its message.
     *
     * @param what        the operation, for the message ({@code "build()"})
     * @param refusal     what this rank refused ({@link IllegalArgumentException}), or null when it accepted everything
     * @param description this rank's settings (when it refused, ignored)
     * @param trainer     the trainer's (data-parallel) group, or null in thread mode
     * @return every rank's description, replica by replica (the trainer's rank order), each replica's in tp rank order;
     *         one replica of one rank without groups to agree over
     * @throws IllegalArgumentException on every rank, when one or more refused (and none failed otherwise)
     * @throws IllegalStateException    on every rank, when one or more failed otherwise, or (on a tp peer of a rank
     *                                  whose network is not attached) when a peer left the agreement
     */
    public List<List<String>> agreeOnBuild(String what, RuntimeException refusal, String description, Group trainer) {
        try {
            return exchangeGrid("refusal", what, refusal, description, trainer, BUILD);
        } catch (IOException e) {
            throw org.symmem4j.parallel.Invariants.violated("an exchange of a runtime refusal threw " + e);
        }
    }

    /**
     * {@link #agree}, and every rank's {@code value} (replica by replica, tp rank order within each) when no rank
     * failed; without groups, this rank's value alone.
     */
    private List<String> exchange(String tag, String what, Exception failure, String value, Group trainer,
                                  String[] wording) throws IOException {
        return exchangeGrid(tag, what, failure, value, trainer, wording).stream().flatMap(List::stream).toList();
    }

    /**
     * {@link #exchange}, every rank's value as replicas (rows) of tp ranks. A rank whose network is not attached
     * ({@link #forBuild}) aborts the trainer's group when it throws, as its tp peers wait for it.
     */
    private List<List<String>> exchangeGrid(String tag, String what, Exception failure, String value, Group trainer,
                                            String[] wording) throws IOException {
        try {
            return agreed(tag, what, failure, value, trainer, wording);
        } catch (IOException | RuntimeException e) {
            if (unattached && trainer != null) {
                // its tp peers wait for it in the tp round, which it cannot join: the abort reaches them (Group#split)
                trainer.abort(e.getMessage());
            }
            throw e;
        }
    }

    /**
     * The exchange: one round over the trainer's group (each rank's text), then one of those columns over the
     * tensor-parallel group ({@link RankAgreement#allGather}); then every rank decides alike from the same grid.
     */
    private List<List<String>> agreed(String tag, String what, Exception failure, String value, Group trainer,
                                      String[] wording) throws IOException {
        boolean overTp = group != null && size >= 2;
        boolean overDp = trainer != null && trainer.worldSize() >= 2;
        if (!overTp && !overDp) {
            if (failure instanceof IOException e) {
                throw e;
            }
            if (failure instanceof RuntimeException e) {
                throw e;
            }
            return List.of(List.of(value));
        }
        String mine = failure == null ? OK + value
                : (failure instanceof IllegalArgumentException ? MISMATCH : FAILED) + failure.getMessage();
        // first over the trainer's group, which every rank has (a tp rank not attached too), then over the tp group
        List<String> column = overDp ? RankAgreement.allGather(trainer, TAG + tag + "-dp", mine) : List.of(mine);
        List<List<String>> grid = new ArrayList<>(); // replica by replica, tp ranks within each
        for (int d = 0; d < column.size(); d++) {
            grid.add(new ArrayList<>());
        }
        if (overTp) {
            for (String tpRank : tpRound(tag, what, encode(column), wording)) {
                List<String> replicas = decode(tpRank);
                for (int d = 0; d < replicas.size(); d++) {
                    grid.get(d).add(replicas.get(d));
                }
            }
        } else {
            for (int d = 0; d < column.size(); d++) {
                grid.get(d).add(column.get(d));
            }
        }
        List<String> row = grid.getFirst();
        List<String> found = new ArrayList<>();
        StringBuilder whatFound = new StringBuilder();
        boolean mismatchOnly = true;
        List<List<String>> values = new ArrayList<>();
        for (int d = 0; d < grid.size(); d++) {
            values.add(new ArrayList<>());
            for (int t = 0; t < grid.get(d).size(); t++) {
                String text = grid.get(d).get(t);
                if (text.startsWith(OK)) {
                    values.get(d).add(text.substring(OK.length()));
                    continue;
                }
                boolean mismatch = text.startsWith(MISMATCH);
                mismatchOnly &= mismatch;
                String id = overTp && overDp ? "dp " + d + " tp " + t : Integer.toString(overTp ? t : d);
                found.add(id);
                whatFound.append(whatFound.isEmpty() ? "" : "; ").append(overDp ? "rank " : "tp rank ").append(id)
                        .append(mismatch ? wording[2] : " failed: ")
                        .append(text.substring(mismatch ? MISMATCH.length() : FAILED.length()));
            }
        }
        if (found.isEmpty()) {
            return values;
        }
        if (values.stream().allMatch(List::isEmpty) && grid.stream().flatMap(List::stream).distinct().count() == 1) {
            // every rank found the same: its own message says it for all
            if (failure instanceof RuntimeException own) {
                throw own;
            }
            if (failure instanceof IOException own) {
                throw own;
            }
        }
        String label = overDp ? "rank" : "tp rank";
        String every = overDp ? "every rank (" + grid.size() * row.size()
                + (overTp ? " = dp " + grid.size() + " x tp " + row.size() : "") + ")"
                : "every tensor-parallel rank (" + size + ")";
        String message = what + " refused on " + every + ": " + label + "(s) " + found
                + (mismatchOnly ? wording[0] : " failed") + ", expected every " + label + wording[1]
                + "; nothing was read into or written from any " + label + "'s model. " + whatFound
                + " (fix: what " + label + " " + found.getFirst() + "'s message says, then retry on every rank)";
        throw mismatchOnly ? new IllegalArgumentException(message, failure) : new IllegalStateException(message, failure);
    }

    /**
     * The tensor-parallel round of {@link #agreed}: every tp rank's column of the trainer's texts. At {@code build()} a
     * tp peer that left the agreement (its network not attached: {@link #forBuild}) is said to be one.
     */
    private List<String> tpRound(String tag, String what, String mine, String[] wording) {
        try {
            return RankAgreement.allGather(group, TAG + tag, mine);
        } catch (org.symmem4j.parallel.PeerTimeoutException e) {
            if (wording != BUILD) {
                throw e;
            }
            throw new IllegalStateException(what + " refused on tensor-parallel rank " + rank + " of " + size + ": a"
                    + " peer of its tensor-parallel group left the agreement, expected every tp rank to take part ("
                    + e.getMessage() + "); nothing was read into or written from this rank's model (fix: what the"
                    + " aborting rank's message says, then retry on every rank)", e);
        }
    }

    /** Who a list of values of {@link #exchange} is by, for messages. */
    private String ranksOf(Group trainer) {
        boolean overDp = trainer != null && trainer.worldSize() >= 2;
        return overDp ? (size >= 2 ? "rank (dp replica by replica, tp rank within each)" : "rank") : "tp rank";
    }

    /** Texts as one: each as its length, a colon, and itself. */
    private static String encode(List<String> texts) {
        StringBuilder b = new StringBuilder();
        for (String t : texts) {
            b.append(t.length()).append(':').append(t);
        }
        return b.toString();
    }

    /** {@link #encode}'s texts back. */
    private static List<String> decode(String joined) {
        List<String> texts = new ArrayList<>();
        int at = 0;
        while (at < joined.length()) {
            int colon = joined.indexOf(':', at);
            int length = Integer.parseInt(joined.substring(at, colon));
            texts.add(joined.substring(colon + 1, colon + 1 + length));
            at = colon + 1 + length;
        }
        return texts;
    }

    /**
     * The newest step complete on every rank of any degree found under {@code root}: this run's degree's (this rank's
     * own directory of it), or another degree's (its rank 0's directory, whose shards {@link #otherDegreeDirs} finds
     * and re-slices); on a tie this run's degree.
     */
    private Optional<CheckpointDirectory.Checkpoint> newestOfEveryDegree(Path root) throws IOException {
        Optional<CheckpointDirectory.Checkpoint> best = newestOnEveryRank(root, size, rank);
        for (int degree : tpDirs(root).stream().map(CheckpointLayout::degreeOf).distinct().sorted().toList()) {
            if (degree == size) {
                continue;
            }
            Optional<CheckpointDirectory.Checkpoint> theirs = newestOnEveryRank(root, degree, 0);
            if (theirs.isPresent() && (best.isEmpty()
                    || theirs.get().counters().step() > best.get().counters().step())) {
                best = theirs;
            }
        }
        return best;
    }

    /** The suffix of a checkpoint's step in {@link #latestComplete}'s exchange: its degree when not this run's. */
    private String degreeSuffix(Path dir) {
        Path parent = dir.getParent();
        String name = parent == null ? "" : parent.getFileName().toString();
        return TP_DIR.matcher(name).matches() && degreeOf(name) != size ? " of degree " + degreeOf(name) : "";
    }

    private Optional<CheckpointDirectory.Checkpoint> newestOnEveryRank(Path root, int size, int rank)
            throws IOException {
        for (Path dir : CheckpointDirectory.stepDirsNewestFirst(root.resolve(tpDirName(rank, size)))) {
            String step = dir.getFileName().toString();
            CheckpointDirectory.Counters mine = verified(dir);
            List<String> torn = new ArrayList<>();
            for (int r = 0; r < size && mine != null; r++) {
                if (r != rank && verified(root.resolve(tpDirName(r, size)).resolve(step)) == null) {
                    torn.add(tpDirName(r, size));
                }
            }
            if (mine != null && torn.isEmpty()) {
                return Optional.of(new CheckpointDirectory.Checkpoint(dir, mine));
            }
            if (mine != null) {
                LOG.warn("symmem4j checkpoint: skipping {} on every tensor-parallel rank: not complete under {}", step,
                        torn);
            }
        }
        return Optional.empty();
    }

    /** The counters of a complete checkpoint directory, or null (logged) when it is torn or absent. */
    private static CheckpointDirectory.Counters verified(Path dir) {
        if (!Files.isDirectory(dir)) {
            return null;
        }
        try {
            return CheckpointDirectory.verify(dir);
        } catch (IOException e) {
            LOG.warn("symmem4j checkpoint: skipping {}: {}", dir, e.getMessage());
            return null;
        }
    }

    /**
     * After a periodic checkpoint: in this rank's directory keeps the {@code keep} newest complete checkpoints and,
     * for a tensor-parallel rank, every one from the newest step complete on every rank on (the one a restart would
     * load, while the other ranks still write the newer one), and deletes every other step directory older than
     * those (complete or torn); torn ones newer than the newest complete one are left ({@link CheckpointDirectory#prune}).
     *
     * @param root the run's checkpoint root
     * @param keep complete checkpoints kept, at least 1
     * @throws IOException when a directory cannot be listed or deleted
     */
    public void prune(Path root, int keep) throws IOException {
        if (size == 0) {
            CheckpointDirectory.prune(root, keep);
            return;
        }
        long floor = newestOnEveryRankQuietly(root);
        if (floor < 0) {
            return; // no step is complete on every rank yet: whatever this rank has may still be the one to load
        }
        TreeSet<String> kept = new TreeSet<>();
        for (Path dir : CheckpointDirectory.stepDirsNewestFirst(ownRoot(root))) {
            boolean complete = quietlyComplete(dir);
            if (complete && kept.size() < keep) {
                kept.add(dir.getFileName().toString());
            }
        }
        String floorName = CheckpointDirectory.stepDir(root, floor).getFileName().toString();
        for (Path dir : CheckpointDirectory.stepDirsNewestFirst(ownRoot(root))) {
            String name = dir.getFileName().toString();
            if (name.compareTo(floorName) < 0 && !kept.contains(name)) {
                CheckpointDirectory.deleteTree(dir);
            }
        }
    }

    /** The newest step complete on every rank, without log lines (pruning runs at every checkpoint); -1 when none. */
    private long newestOnEveryRankQuietly(Path root) throws IOException {
        for (Path dir : CheckpointDirectory.stepDirsNewestFirst(ownRoot(root))) {
            String step = dir.getFileName().toString();
            boolean all = quietlyComplete(dir);
            for (int r = 0; r < size && all; r++) {
                all = r == rank || quietlyComplete(root.resolve(tpDirName(r, size)).resolve(step));
            }
            if (all) {
                return Long.parseLong(step.substring("step-".length()));
            }
        }
        return -1;
    }

    private static boolean quietlyComplete(Path dir) {
        try {
            return Files.isDirectory(dir) && CheckpointDirectory.verify(dir) != null;
        } catch (IOException e) {
            return false;
        }
    }

    /**
     * Refuses a root or checkpoint directory that holds tensor-parallel ranks' directories for a run that is not
     * tensor-parallel: it would find no {@code step-<n>} there and start over silently.
     *
     * @param root a checkpoint root or directory
     * @throws IOException              when it cannot be listed
     * @throws IllegalArgumentException when it holds {@code tp-R-of-S} directories
     */
    static void refuseTensorParallelRoot(Path root) throws IOException {
        List<String> tp = tpDirs(root);
        if (!tp.isEmpty()) {
            throw new IllegalArgumentException("checkpoint root " + root + " holds a tensor-parallel run's checkpoints "
                    + tp + ": expected a network that is not tensor-parallel's (step-<n> directories), found tensor-parallel"
                    + " degree " + degreeOf(tp.getFirst()) + " (fix: resume on a tensor-parallel run, of that degree or of"
                    + " another that divides the sharded layers' split dimensions (the shards are re-sliced), each rank's"
                    + " network sharded with TensorParallel.shard and attached before build(); or give this run a new"
                    + " root)");
        }
    }

    /**
     * Refuses a checkpoint root this run may neither write into nor resume from: for a tensor-parallel rank one with a
     * plain run's {@code step-<n>} (another degree's {@code tp-R-of-S} directories are re-sliced); for a plain run one
     * with tensor-parallel ranks' directories. An absent root passes.
     *
     * @param root the run's checkpoint root
     * @throws IOException              when it cannot be listed
     * @throws IllegalArgumentException when it was written by another kind of run (named, with the fix)
     */
    public void checkRoot(Path root) throws IOException {
        if (size == 0) {
            refuseTensorParallelRoot(root);
        } else {
            checkDegree(root);
        }
    }

    /**
     * Refuses a root written by a plain run. Another degree's {@code tp-R-of-S} directories are welcome: its newest
     * checkpoint is re-sliced onto this degree ({@link #otherDegreeDirs}), and this run writes its own beside them.
     */
    private void checkDegree(Path root) throws IOException {
        if (Files.isDirectory(root)) {
            try (Stream<Path> listing = Files.list(root)) {
                List<String> plain = listing.map(p -> p.getFileName().toString())
                        .filter(n -> STEP_DIR.matcher(n).matches()).sorted().toList();
                if (!plain.isEmpty()) {
                    throw new IllegalArgumentException("checkpoint root " + root + " holds checkpoints of a network that"
                            + " is not tensor-parallel " + plain + ": expected tensor-parallel degree " + size + "'s"
                            + " (tp-R-of-" + size + " directories) (fix: restore the whole network with a plain run,"
                            + " shard it with TensorParallel.shard(restored, tpRank, " + size + ", columnLayers), or give"
                            + " this run a new root)");
                }
            }
        }
    }

    private static List<String> tpDirs(Path root) throws IOException {
        if (!Files.isDirectory(root)) {
            return List.of();
        }
        try (Stream<Path> listing = Files.list(root)) {
            return listing.filter(Files::isDirectory).map(p -> p.getFileName().toString())
                    .filter(n -> TP_DIR.matcher(n).matches()).sorted().toList();
        }
    }

    private static int degreeOf(String tpDir) {
        Matcher m = TP_DIR.matcher(tpDir);
        if (!m.matches()) {
            throw org.symmem4j.parallel.Invariants.violated("tensor-parallel directory name " + tpDir);
        }
        return Integer.parseInt(m.group(2));
    }

    private static String tpDirName(int rank, int size) {
        return "tp-" + rank + "-of-" + size;
    }

    @Override
    public String toString() {
        return size == 0 ? "plain" : tpDirName(rank, size);
    }
}
