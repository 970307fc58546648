package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.numeric.BFloat16;
import org.symmem4j.parallel.tensor.FullyShardedMlp;
import org.symmem4j.parallel.tensor.FullyShardedMlp.Adam;
import org.symmem4j.parallel.tensor.FullyShardedMlp.Sharding;
import org.symmem4j.parallel.tensor.FullyShardedMlp.State;
import org.symmem4j.parallel.tensor.ShrinkingMlp;

/**
 * One rank of {@link CudaShrinkTest}, a process of its own under the test's stand-in for {@code symmem4j-run --on-failure
 * shrink}: joins a {@link ProcessGroup} on a {@link CudaTransport}, allocates a symmetric "ballast" (every peer's mapped
 * here, so a mapping of the dead rank's memory that is not released shows in the device's free memory), and trains a
 * {@link ShrinkingMlp} ({@link Sharding#NONE}) for {@code steps} steps; rank {@code killRank} sends itself SIGKILL after
 * {@code killAfter} steps. A survivor checks:
 * <ul>
 *   <li>one shrink, at step {@code killAfter}, without the killed rank, from N to N − 1 ranks;</li>
 *   <li>its final state (master weights and Adam's moments) equals, bitwise, that of a fresh {@link FullyShardedMlp} on the
 *       survivors' group started from the state it recorded after step {@code killAfter} (before the kill) over the same
 *       batches, and every survivor's replica is bitwise the same;</li>
 *   <li>the device's free memory after everything of the old and new group is closed is not below what it was before the
 *       ballast and the model (cuMemGetInfo; the dead process's own memory is given back by the driver, so a survivor
 *       that kept its own ballast or its mapping of the dead rank's would be short of {@code ballastMiB});</li>
 *   <li>no CUDA descriptor socket of the killed process is left in the secrets' directory (the survivors removed it
 *       as they shrank).</li>
 * </ul>
 * Prints {@code SHRINK OK rank=R} (R the launch rank) and exits 0, or prints what failed and exits 3.
 *
 * <p>Arguments: {@code steps killRank killAfter ballastMiB}, e.g. {@code 6 1 3 4096}.
 */
public final class CudaShrinkWorker {

    /** What the old and new groups' per-group GPU state may leave taken (streams, launch scratch, the driver's own). */
    static final long TOLERANCE_BYTES = 256L << 20;
    /**
     * What a survivor that the shrink moved onto this GPU holds there while it runs: its primary context, cuBLAS's and
     * NCCL's state (device = new rank mod GPUs, so with more ranks than GPUs a survivor can change GPU; measured on
     * 2 × H200 with 4 ranks: 556 MiB for one moved survivor). A kept ballast or kept mapping of the dead rank's is
     * 4 GiB, well above it.
     */
    static final long MOVED_SURVIVOR_BYTES = 768L << 20;
    static final int TOKENS = 48;
    static final int[] WIDTHS = {48, 96, 64, 32};

    private CudaShrinkWorker() {
    }

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> run(Integer.parseInt(args[0]), Integer.parseInt(args[1]), Integer.parseInt(args[2]),
                Long.parseLong(args[3]) << 20));
    }

    private static String run(int steps, int killRank, int killAfter, long ballastBytes) throws Exception {
        try (CudaTransport cuda = CudaTransport.create();
             ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults(), cuda)) {
            int launchRank = group.rank();
            int world = group.worldSize();
            System.out.println("rank=" + launchRank + " pid=" + ProcessHandle.current().pid() + " on " + cuda.describe(group)
                    + "; " + cuda.runtimeVersions());
            byte[] none = new byte[0];
            List<byte[]> pids = group.allGatherBytes("pids", ByteBuffer.allocate(Long.BYTES)
                    .putLong(ProcessHandle.current().pid()).array());
            long killedPid = ByteBuffer.wrap(pids.get(killRank)).getLong();
            Adam adam = new Adam(0.02f, 0.9f, 0.999f, 1e-3f);
            // warm: a model made and closed once loads what a process loads once (cuBLAS's kernels, the sub-group's GPU
            // state), so that the free memory below compares like with like
            new FullyShardedMlp(group, TOKENS, WIDTHS, Sharding.NONE, adam).close();
            group.allGatherBytes("free-before", none); // every rank warm, nothing of the run allocated yet
            // the model's close released its sub-group's GPU state, and with it this thread's current context: the
            // group's own state again, for a context to ask cuMemGetInfo in (as after the shrink below)
            cuda.describe(group);
            long before = cuda.driver().memoryInfo()[0];
            group.allGatherBytes("free-before-read", none);
            SymmetricMemory[] ballast = {SymmetricMemory.allocate(group, ballastBytes)};
            List<State> recorded = new ArrayList<>(); // the state after each completed step, on the old and new group
            ShrinkingMlp.Batches batches = CudaShrinkWorker::write;
            try (ShrinkingMlp trainer = ShrinkingMlp.create(group, TOKENS, WIDTHS, Sharding.NONE, adam, world - 1)
                    .onShrink(old -> {
                        ballast[0].close(); // this rank's memory of the old group: closed before its release
                        ballast[0] = null;
                    })) {
                for (int l = 0; l < WIDTHS.length - 1; l++) {
                    double[] w = initialWeights(l);
                    trainer.setWeights(l, i -> w[(int) i]);
                }
                recorded.add(trainer.model().state());
                while (trainer.steps() < steps) {
                    if (launchRank == killRank && trainer.steps() == killAfter) {
                        killSelf();
                    }
                    trainer.step(batches);
                    recorded.add(trainer.model().state());
                }
                check(trainer, recorded, batches, killRank, killAfter, world, adam);
                checkNoSocketOf(killedPid);
            } finally {
                if (ballast[0] != null) {
                    ballast[0].close();
                }
            }
            // the original group's GPU state again (released at the shrink), for a current context to ask cuMemGetInfo in;
            // every survivor has closed everything: the trainer's close met the survivors before freeing
            cuda.describe(group);
            long after = cuda.driver().memoryInfo()[0];
            cuda.release(group);
            System.out.println("free device memory before the ballast and the model " + (before >> 20) + " MiB, after"
                    + " the shrink and every close " + (after >> 20) + " MiB (ballast " + (ballastBytes >> 20) + " MiB per"
                    + " rank)");
            int movedHere = survivorsMovedOnto(launchRank % deviceCount(cuda), world, killRank, deviceCount(cuda));
            long tolerance = TOLERANCE_BYTES + movedHere * MOVED_SURVIVOR_BYTES;
            if (before - after > tolerance) {
                throw new AssertionError("the shrink left " + ((before - after) >> 20) + " MiB of device memory taken"
                        + " (tolerance " + (tolerance >> 20) + " MiB, " + movedHere + " survivor(s) moved onto this GPU):"
                        + " a survivor kept its own ballast or its mapping of the dead rank's, or the old model's memory");
            }
            return "SHRINK OK rank=" + launchRank;
        }
    }

    private static int deviceCount(CudaTransport cuda) {
        return cuda.driver().deviceCount();
    }

    /**
     * How many survivors the shrink moved onto GPU {@code ordinal} from another one: the survivors keep their launch
     * order, so launch rank r becomes r (below the dead rank) or r − 1 (above it), and a rank's GPU is its rank mod
     * {@code devices}.
     */
    static int survivorsMovedOnto(int ordinal, int world, int killRank, int devices) {
        int moved = 0;
        for (int r = 0; r < world; r++) {
            if (r == killRank) {
                continue;
            }
            int newRank = r < killRank ? r : r - 1;
            if (newRank % devices == ordinal && r % devices != ordinal) {
                moved++;
            }
        }
        return moved;
    }

    /**
     * The killed rank's CUDA descriptor socket (its process could not remove it) is gone from the secrets' directory: the
     * survivors removed it as they shrank.
     */
    private static void checkNoSocketOf(long killedPid) throws java.io.IOException {
        java.nio.file.Path dir = org.symmem4j.parallel.rendezvous.StoreSecret.hostDirectory();
        try (java.nio.file.DirectoryStream<java.nio.file.Path> left = java.nio.file.Files.newDirectoryStream(dir,
                CrossProcessMemory.SOCKET_PREFIX + "-" + killedPid + "-*.sock")) {
            for (java.nio.file.Path p : left) {
                throw new AssertionError("the killed rank's descriptor socket " + p + " is still in " + dir + " after the"
                        + " shrink");
            }
        }
        System.out.println("no descriptor socket of the killed process " + killedPid + " left in " + dir);
    }

    /**
     * Step {@code step}'s batch of rank {@code rank}: random bfloat16 inputs and output gradients from a seed of both
     * (self-contained: the worker JVM has no JUnit, so it uses no test class that does).
     */
    private static void write(FullyShardedMlp mlp, long step, int rank, int worldSize) {
        try (Arena arena = Arena.ofConfined()) {
            mlp.device().copyFromHost(mlp.input(), bf16(arena, 2000 + 100 * step + rank, TOKENS * WIDTHS[0], 1));
            mlp.device().copyFromHost(mlp.outputGradient(), bf16(arena, 3000 + 100 * step + rank,
                    TOKENS * WIDTHS[WIDTHS.length - 1], 0.5));
            mlp.device().synchronize(); // the arena's host copies must outlive the copies
        }
    }

    private static MemorySegment bf16(Arena arena, long seed, int count, double scale) {
        SplittableRandom rnd = new SplittableRandom(seed);
        MemorySegment s = arena.allocate(2L * count, 16);
        for (int i = 0; i < count; i++) {
            s.setAtIndex(ValueLayout.JAVA_SHORT, i, BFloat16.fromFloat((float) (rnd.nextDouble(-1, 1) * scale)));
        }
        return s;
    }

    /** Layer l's initial weight: uniform in ±1/√in, float32 values. */
    private static double[] initialWeights(int l) {
        SplittableRandom rnd = new SplittableRandom(1000 + l);
        double[] x = new double[WIDTHS[l] * WIDTHS[l + 1]];
        double scale = 1 / Math.sqrt(WIDTHS[l]);
        for (int i = 0; i < x.length; i++) {
            x[i] = (float) (rnd.nextDouble(-1, 1) * scale);
        }
        return x;
    }

    private static void killSelf() throws Exception {
        System.out.println("rank killing itself (SIGKILL) after its completed steps");
        System.out.flush();
        try {
            new ProcessBuilder("kill", "-9", Long.toString(ProcessHandle.current().pid())).inheritIO().start().waitFor();
        } catch (java.io.IOException noKill) {
            System.out.println("no kill command (" + noKill + "): halting with status 137 instead, no cleanup either");
            System.out.flush();
            Runtime.getRuntime().halt(137);
        }
        Thread.sleep(60_000);
        throw new AssertionError("still alive 60 s after kill -9 of itself");
    }

    private static void check(ShrinkingMlp trainer, List<State> recorded, ShrinkingMlp.Batches batches, int killRank,
                              int killAfter, int world, Adam adam) {
        List<ShrinkingMlp.Shrink> shrinks = trainer.shrinks();
        System.out.println("shrinks: " + shrinks);
        if (shrinks.size() != 1) {
            throw new AssertionError("expected one shrink, found " + shrinks);
        }
        ShrinkingMlp.Shrink s = shrinks.getFirst();
        if (s.step() != killAfter || !s.dead().equals(List.of(killRank)) || s.before() != world || s.after() != world - 1) {
            throw new AssertionError("expected a shrink at step " + killAfter + " without rank " + killRank + " from " + world
                    + " to " + (world - 1) + " ranks, found " + s);
        }
        System.out.println("shrink took " + s.nanos() / 1_000_000 + " ms from the failure to the restored state");
        Group survivors = trainer.group();
        State end = trainer.model().state();
        // a fresh model of the survivors' size, started from the state recorded after the last step all completed
        try (FullyShardedMlp fresh = new FullyShardedMlp(survivors, TOKENS, WIDTHS, Sharding.NONE, adam)) {
            fresh.restore(recorded.get(killAfter));
            for (long step = killAfter; step < trainer.steps(); step++) {
                batches.write(fresh, step, survivors.rank(), survivors.worldSize());
                fresh.step();
            }
            State reference = fresh.state();
            if (reference.steps() != end.steps()) {
                throw new AssertionError("steps " + end.steps() + ", the fresh model's " + reference.steps());
            }
            assertBitwise(end, reference, "the shrunk run against a fresh " + survivors.worldSize() + "-rank model from"
                    + " step " + killAfter + "'s state");
        }
        // every survivor's replica is the same, bit for bit
        byte[] mine = ByteBuffer.allocate(Integer.BYTES).putInt(hash(end)).array();
        List<byte[]> all = survivors.allGatherBytes("shrink-test-replicas", mine);
        for (int r = 0; r < all.size(); r++) {
            if (!Arrays.equals(all.get(r), mine)) {
                throw new AssertionError("survivor " + r + "'s replica differs from survivor " + survivors.rank() + "'s");
            }
        }
        // the weights moved after the shrink: the comparison above compares training, not two copies of one state
        if (Arrays.equals(end.master()[0], recorded.get(killAfter).master()[0])) {
            throw new AssertionError("layer 0 did not change after the shrink");
        }
        System.out.println("after the shrink: bitwise equal to a fresh model from step " + killAfter + "'s state, every"
                + " replica the same");
    }

    private static void assertBitwise(State a, State b, String what) {
        float[][][] as = {a.master(), a.moment1(), a.moment2()};
        float[][][] bs = {b.master(), b.moment1(), b.moment2()};
        String[] names = {"master", "moment1", "moment2"};
        for (int k = 0; k < 3; k++) {
            for (int l = 0; l < as[k].length; l++) {
                for (int i = 0; i < as[k][l].length; i++) {
                    if (Float.floatToRawIntBits(as[k][l][i]) != Float.floatToRawIntBits(bs[k][l][i])) {
                        throw new AssertionError(what + ": " + names[k] + " of layer " + l + " element " + i + " is "
                                + as[k][l][i] + ", expected " + bs[k][l][i]);
                    }
                }
            }
        }
    }

    private static int hash(State s) {
        int h = Long.hashCode(s.steps());
        for (float[][] part : List.of(s.master(), s.moment1(), s.moment2())) {
            for (float[] layer : part) {
                h = 31 * h + Arrays.hashCode(layer);
            }
        }
        return h;
    }
}
