package org.symmem4j.examples;

import java.io.File;
import java.io.IOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of the data-parallel job {@link RestartAfterKillTest} starts with {@code symmem4j-run --max-restarts 1}:
 * it trains the example's MLP with checkpoints every K steps that it resumes from
 * ({@code .checkpointEvery(K, dir).resumeFrom(dir)}); in generation 0, rank 1 kills itself with {@code kill -9} after
 * step S (S steps completed) when S is given. It prints, with wall-clock milliseconds, the kill, what it resumed from
 * (and when its main began, its group formed, its network was made and restored) and its first step; rank 0 writes
 * the final model with {@link ModelSerializer}.
 *
 * <p>Resume on another worker count: start it again with another {@code -n} on the same checkpoint directory (as
 * {@link ResumeOnAnotherWorkerCountTest} does after a failed 2-rank job, on 3): the wrapper re-shards the checkpoint of
 * N ranks onto the M it runs and goes on at the same batch of the data (every rank count deals the same batches in
 * the same order); it prints {@code RESHARDED from N to M ranks at step S} first.
 *
 * <pre>RestartingTraining checkpointDir modelFile everyK epochs killAfterStep(-1: none) [zeroStage]</pre>
 *
 * <p>With a ZeRO stage ({@code OPTIMIZER_STATE} or {@code GRADIENTS}) each rank keeps the updater state of its shard
 * only, and the checkpoints hold one shard file per rank.
 */
public final class RestartingTraining {

    private RestartingTraining() {
    }

    /** 48 batches of 16: 24 steps per epoch for 2 ranks. */
    static List<DataSet> batches() {
        return new SyntheticData(64, 10, 1).batches(2, 48, 16, DataType.FLOAT);
    }

    public static void main(String[] args) throws IOException {
        long started = System.currentTimeMillis();
        Path checkpoints = Path.of(args[0]);
        File model = new File(args[1]);
        int every = Integer.parseInt(args[2]);
        int epochs = Integer.parseInt(args[3]);
        long killAfter = Long.parseLong(args[4]);
        ZeroStage sharding = args.length > 5 ? ZeroStage.valueOf(args[5]) : null;
        int generation = Integer.parseInt(System.getenv().getOrDefault("SYMMEM4J_RESTART_GENERATION", "0"));
        ProcessGroup group = ProcessGroup.fromEnvironment();
        long grouped = System.currentTimeMillis();
        int rank = group.rank();
        List<DataSet> data = batches();
        MultiLayerNetwork net = DataParallelExample.mlp(64, 32, 10);
        long made = System.currentTimeMillis(); // ND4J's native libraries load with the first network
        boolean[] first = {true};
        SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(net).group(group).ompThreadsPerWorker(1)
                .checkpointEvery(every, checkpoints).resumeFrom(checkpoints)
                .stepListener(report -> {
                    long step = report.step() + 1; // steps completed, as a checkpoint counts them
                    if (first[0]) {
                        first[0] = false;
                        System.out.printf(Locale.ROOT, "FIRST STEP %d of generation %d at %d ms%n", step,
                                generation, System.currentTimeMillis());
                    }
                    if (generation == 0 && rank == 1 && step == killAfter) {
                        System.out.printf(Locale.ROOT, "KILL rank 1 after step %d at %d ms%n", step,
                                System.currentTimeMillis());
                        System.out.flush();
                        killMyself();
                    }
                });
        if (sharding != null) {
            builder.sharding(sharding);
        }
        try (group; SymmemParallelWrapper wrapper = builder.build()) {
            if (wrapper.resumedFrom() != null && wrapper.resumedFrom().counters().ranks() != group.worldSize()) {
                System.out.printf(Locale.ROOT, "RESHARDED from %d to %d ranks at step %d (batch %d of epoch %d)%n",
                        wrapper.resumedFrom().counters().ranks(), group.worldSize(), wrapper.resumedFrom().counters().step(),
                        wrapper.resumedFrom().counters().batchesInEpoch(), wrapper.resumedFrom().counters().epoch());
            }
            if (wrapper.resumedFrom() != null) {
                System.out.printf(Locale.ROOT, "RESUMED generation %d from step %d (epoch %d); main at %d ms, group at %d"
                                + " ms, network at %d ms, restored at %d ms%n", generation,
                        wrapper.resumedFrom().counters().step(), wrapper.resumedFrom().counters().epoch(), started,
                        grouped, made, System.currentTimeMillis());
            }
            for (int e = net.getEpochCount(); e < epochs; e++) {
                wrapper.fit(new ListIterator(data));
            }
        }
        if (rank == 0) {
            ModelSerializer.writeModel(net, model, true);
            System.out.printf(Locale.ROOT, "DONE generation %d, %d iterations%n", generation, net.getIterationCount());
        }
    }

    /** kill -9 of this JVM's own pid: no shutdown hook, no close, as a crash or the OOM killer would. */
    static void killMyself() {
        try {
            new ProcessBuilder("kill", "-9", Long.toString(ProcessHandle.current().pid())).inheritIO().start().waitFor();
            Thread.sleep(60_000); // the signal lands while this waits
        } catch (IOException | InterruptedException e) {
            // no kill(1): halt instead, as abruptly
        }
        Runtime.getRuntime().halt(137);
    }
}
