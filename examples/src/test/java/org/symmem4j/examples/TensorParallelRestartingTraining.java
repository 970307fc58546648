package org.symmem4j.examples;

import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of the tensor-parallel job that {@link TensorParallelRestartAfterKillTest} starts with
 * {@code symmem4j-run --max-restarts N}: the ranks form a {@code dp x tp} mesh ({@link DeviceMesh}), each shards the
 * same tiny MLP ({@link DataParallelExample#mlp}{@code (64, 16, 10)}: layer 0 column-parallel, layer 1 row-parallel)
 * for its tp rank, attaches it to the tp group's communicator and trains it with a {@link SymmemParallelWrapper} over
 * its dp group, with a periodic checkpoint every K steps that it resumes from
 * ({@code .checkpointEvery(K, dir).resumeFrom(dir)}: each tp rank's shard under {@code dir/tp-R-of-S}). It injects the
 * {@code kill@g<G>r<R>s<S>} faults it is given ({@link RestartingTraining.Fault}: {@code kill -9} of world rank R
 * after step S of generation G; {@code stop@...} too).
 *
 * <p>It prints (the launcher prefixes {@code [rank N]}) its start and pid, each kill, where it resumed, its first step,
 * and at the end writes {@code out/rank-<world rank>.bin}: its shard's parameters and updater state as raw IEEE bits,
 * its iteration and epoch counts, which the test compares bitwise with an uninterrupted run's.
 *
 * <pre>TensorParallelRestartingTraining checkpointDir outDir everyK epochs dp|auto tp|auto [fault ...]</pre>
 */
public final class TensorParallelRestartingTraining {

    /** Every wait's bound: it only ends a hang (a loaded machine starts 2 JVMs slowly); nothing depends on it. */
    static final Duration TIMEOUT = Duration.ofMinutes(3);

    private TensorParallelRestartingTraining() {
    }

    /** 8 batches of 16: 8 steps per epoch for one dp rank, 4 for two. */
    static List<DataSet> batches() {
        return new SyntheticData(64, 10, 1).batches(2, 8, 16, DataType.FLOAT);
    }

    public static void main(String[] args) throws IOException {
        Path checkpoints = Path.of(args[0]);
        Path out = Path.of(args[1]);
        int every = Integer.parseInt(args[2]);
        int epochs = Integer.parseInt(args[3]);
        boolean auto = args[5].equals("auto"); // the mesh from the world size: the launcher may change it on a restart
        int fixedDp = auto ? 0 : Integer.parseInt(args[4]);
        int fixedTp = auto ? 0 : Integer.parseInt(args[5]);
        List<RestartingTraining.Fault> faults = new ArrayList<>();
        for (int i = 6; i < args.length; i++) {
            faults.add(RestartingTraining.Fault.parse(args[i]));
        }
        int generation = Integer.parseInt(System.getenv().getOrDefault("SYMMEM4J_RESTART_GENERATION", "0"));
        int envRank = Integer.parseInt(System.getenv().getOrDefault("RANK", "0"));
        System.out.printf(Locale.ROOT, "START rank %d generation %d pid %d at %d ms%n", envRank, generation,
                ProcessHandle.current().pid(), System.currentTimeMillis());
        try (ProcessGroup world = ProcessGroup.fromEnvironment(GroupOptions.defaults().withTimeout(TIMEOUT))) {
            int tp = auto ? degreeFor(world.worldSize()) : fixedTp;
            int dp = auto ? world.worldSize() / tp : fixedDp;
            byte[] result = train(world, dp, tp, checkpoints, every, epochs, faults, generation);
            Path file = out.resolve("rank-" + world.rank() + ".bin");
            Files.createDirectories(out);
            Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
            Files.write(tmp, result);
            Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE);
        }
    }

    /**
     * The tensor-parallel degree of a world of {@code ranks} ({@code dp tp} given as {@code auto auto}): the largest
     * divisor of {@code ranks} that divides the MLP's hidden width 16 (its split dimension), so 2 ranks run
     * {@code 1 x 2}, 3 run {@code 3 x 1}, 4 run {@code 1 x 4}; a resume on another degree re-slices the shards.
     */
    static int degreeFor(int ranks) {
        for (int tp = ranks; tp > 1; tp--) {
            if (ranks % tp == 0 && HIDDEN % tp == 0) {
                return tp;
            }
        }
        return 1;
    }

    /** The MLP's hidden width, which its column-parallel layer splits. */
    static final int HIDDEN = 16;

    /**
     * One rank's training on {@code world}'s ranks (processes, or threads of one JVM for a reference run), as described
     * above.
     *
     * @return what this rank ended with ({@link #result})
     */
    static byte[] train(Group world, int dp, int tp, Path checkpoints, int every, int epochs,
                        List<RestartingTraining.Fault> faults, int generation) throws IOException {
        List<DataSet> data = batches();
        MultiLayerNetwork unsharded = DataParallelExample.mlp(64, HIDDEN, 10);
        try (DeviceMesh mesh = DeviceMesh.of(world, "dp", dp, "tp", tp)) {
            Group tpGroup = mesh.group("tp");
            int rank = world.rank();
            MultiLayerNetwork mine = TensorParallel.shard(unsharded, tpGroup.rank(), tp, 0);
            try (Communicator c = Communicator.create(tpGroup)) {
                TensorParallel.attach(mine, c);
                SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(mine).group(mesh.group("dp"))
                        .ompThreadsPerWorker(1).checkpointEvery(every, checkpoints).resumeFrom(checkpoints)
                        .stepListener(RestartingTraining.faultsAfterSteps(faults, generation, rank));
                try (SymmemParallelWrapper wrapper = builder.build()) {
                    CheckpointDirectory.Checkpoint from = wrapper.resumedFrom();
                    if (from != null) {
                        System.out.printf(Locale.ROOT, "RESUMED generation %d from step %d (epoch %d) dir %s%n",
                                generation, from.counters().step(), from.counters().epoch(),
                                checkpoints.relativize(from.dir()));
                    }
                    for (int e = mine.getEpochCount(); e < epochs; e++) {
                        wrapper.fit(new ListIterator(data));
                    }
                }
                System.out.printf(Locale.ROOT, "DONE generation %d, %d iterations, tp rank %d of %d%n", generation,
                        mine.getIterationCount(), tpGroup.rank(), tp);
                return result(mine);
            }
        }
    }

    /**
     * A shard's counters, then its parameters and updater state as raw float bits (each preceded by its length): equal
     * bytes are a bitwise equal shard.
     */
    static byte[] result(MultiLayerNetwork net) throws IOException {
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        try (DataOutputStream o = new DataOutputStream(bytes)) {
            o.writeInt(net.getIterationCount());
            o.writeInt(net.getEpochCount());
            for (float[] values : new float[][] {net.params().dup().data().asFloat(),
                    net.getUpdater().getStateViewArray().dup().data().asFloat()}) {
                o.writeInt(values.length);
                for (float v : values) {
                    o.writeInt(Float.floatToRawIntBits(v));
                }
            }
        }
        return bytes.toByteArray();
    }
}
