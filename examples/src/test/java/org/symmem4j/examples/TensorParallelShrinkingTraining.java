package org.symmem4j.examples;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.List;
import java.util.Locale;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.ReplicaLostException;
import org.symmem4j.dl4j.ShrinkReport;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.WorkerFailure;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of the {@code dp x tp} job {@link TensorParallelShrinkAfterKillTest} starts with
 * {@code symmem4j-run --on-failure shrink}: the ranks form a {@link DeviceMesh} ({@code "dp", dp, "tp", tp}), each shards
 * the example's MLP ({@link DataParallelExample#mlp}{@code (64, 16, 10)}: layer 0 column-parallel, layer 1
 * row-parallel) for its tp rank, attaches it to its tp group's communicator and trains it with a
 * {@link SymmemParallelWrapper} over {@code group(mesh, "dp")} with {@code onWorkerFailure(SHRINK)}. World rank
 * {@code killRank} kills itself ({@code kill -9}) after step {@code killAfter}; its tp peers leave
 * ({@link ReplicaLostException}: printed as {@code LEFT}, exit status 0), the other replicas shrink the mesh and finish.
 *
 * <p>It prints (the launcher prefixes {@code [rank N]}) its pid, the kill, each shrink, the pids whose shared-memory
 * files it maps after the fit and after closing, and a survivor writes {@code out/rank-<world rank>.bin}
 * ({@link TensorParallelRestartingTraining#result}: its shard's parameters, updater state and counters as raw bits).
 *
 * <p>With a ZeRO stage and a checkpoint root as the last two arguments, the wrapper shards the updater state over the dp
 * axis ({@code sharding(stage)}) and checkpoints every 2 steps into the root (each tp rank its {@code tp-R-of-S}); the
 * survivors then go back to the newest checkpoint, and each prints it with its shrink.
 *
 * <pre>TensorParallelShrinkingTraining outDir dp tp killRank killAfterStep [stage checkpointRoot]</pre>
 */
public final class TensorParallelShrinkingTraining {

    /** Every wait's bound: the dead rank is named within about a second by liveness; this only ends a hang. */
    static final Duration TIMEOUT = Duration.ofSeconds(60);

    private TensorParallelShrinkingTraining() {
    }

    /** 24 batches of 16: 8 steps on 3 replicas. */
    static List<DataSet> batches() {
        return new SyntheticData(64, 10, 1).batches(2, 24, 16, DataType.FLOAT);
    }

    /** This rank's shard of the job's MLP, attached to {@code tp}'s communicator by the caller. */
    static MultiLayerNetwork shard(int tpRank, int tp) {
        return TensorParallel.shard(DataParallelExample.mlp(64, 16, 10), tpRank, tp, 0);
    }

    public static void main(String[] args) throws IOException {
        Path out = Path.of(args[0]);
        int dp = Integer.parseInt(args[1]);
        int tp = Integer.parseInt(args[2]);
        int killRank = Integer.parseInt(args[3]);
        long killAfter = Long.parseLong(args[4]);
        ZeroStage stage = args.length > 5 ? ZeroStage.valueOf(args[5]) : null;
        Path checkpoints = args.length > 6 ? Path.of(args[6]) : null;
        System.out.println("PID " + ProcessHandle.current().pid());
        byte[] result = null;
        ProcessGroup world = ProcessGroup.fromEnvironment(GroupOptions.defaults().withTimeout(TIMEOUT));
        int rank = world.rank();
        try (world; DeviceMesh mesh = DeviceMesh.of(world, "dp", dp, "tp", tp)) {
            MultiLayerNetwork mine = shard(mesh.coordinate("tp"), tp);
            try (Communicator c = Communicator.create(mesh.group("tp"))) {
                TensorParallel.attach(mine, c);
                SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(mine).group(mesh, "dp");
                if (stage != null) {
                    builder.sharding(stage).checkpointEvery(2, checkpoints).keepCheckpoints(20);
                }
                try (SymmemParallelWrapper wrapper = builder
                        .ompThreadsPerWorker(1).onWorkerFailure(WorkerFailure.SHRINK)
                        .stepListener(report -> {
                            if (rank == killRank && report.step() == killAfter) {
                                System.out.printf(Locale.ROOT, "KILL rank %d after step %d at %d ms%n", rank,
                                        report.step(), System.currentTimeMillis());
                                System.out.flush();
                                RestartingTraining.killMyself();
                            }
                        }).build()) {
                    try {
                        wrapper.fit(new ListIterator(batches()));
                    } catch (ReplicaLostException e) {
                        System.out.printf(Locale.ROOT, "LEFT at %d ms: %s%n", System.currentTimeMillis(), e.getMessage());
                        System.out.flush();
                        return; // status 0: this rank did nothing wrong; the survivors finish the job
                    }
                    long nowNanos = System.nanoTime();
                    long nowMillis = System.currentTimeMillis();
                    for (ShrinkReport s : wrapper.shrinks()) {
                        System.out.printf(Locale.ROOT, "SHRUNK step %d dead %s from %d to %d redone %b resumed at %d ms"
                                + " mesh %s back to step %d checkpoint %s%n", s.step(), s.dead(), s.workersBefore(),
                                s.workersAfter(), s.redone(), nowMillis - (nowNanos - s.resumedNanos()) / 1_000_000,
                                wrapper.mesh(), s.resumedAt(), s.checkpoint());
                    }
                    System.out.printf(Locale.ROOT, "DONE world rank %d, %d replicas at the end, %d iterations%n", rank,
                            wrapper.workers(), mine.getIterationCount());
                    System.out.println("MAPPED after fit " + ShrinkingTraining.mappedSharedMemoryOwners());
                    result = TensorParallelRestartingTraining.result(mine);
                }
            }
        } finally {
            System.out.println("MAPPED after close " + ShrinkingTraining.mappedSharedMemoryOwners());
        }
        Path file = out.resolve("rank-" + rank + ".bin");
        Files.createDirectories(out);
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        Files.write(tmp, result);
        Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE);
    }

    /**
     * The reference's one phase, on {@code world}'s ranks as threads of one JVM: plain {@code dp x tp} (no SHRINK) of
     * {@code mine} (this rank's shard, attached here) over {@code data}.
     */
    static MultiLayerNetwork train(Group world, int dp, int tp, MultiLayerNetwork mine, List<DataSet> data) {
        try (DeviceMesh mesh = DeviceMesh.of(world, "dp", dp, "tp", tp);
             Communicator c = Communicator.create(mesh.group("tp"))) {
            MultiLayerNetwork net = mine != null ? mine : shard(mesh.coordinate("tp"), tp);
            TensorParallel.attach(net, c);
            try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).group(mesh.group("dp"))
                    .ompThreadsPerWorker(1).build()) {
                wrapper.fit(new ListIterator(data));
            }
            return net;
        }
    }
}
