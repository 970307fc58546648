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
import org.symmem4j.dl4j.ReplicaLostException;
import org.symmem4j.dl4j.ShrinkReport;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.WorkerFailure;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of the data-parallel job {@link ShrinkAfterKillTest} starts with {@code symmem4j-run --on-failure shrink}:
 * it trains the example's MLP in group mode with {@code onWorkerFailure(SHRINK)}; rank {@code killRank} kills itself
 * with {@code kill -9} after step {@code killAfter} (0-based) when it is 0 or more. It prints its pid, the kill (with
 * wall-clock milliseconds), each shrink it went through (the wall-clock time its next step was handed out), and the
 * survivor that is rank 0 at the end writes the final model with {@link ModelSerializer}. After its fit, and again
 * once closed, it prints the pids whose shared-memory files it still maps ({@code MAPPED after fit [..]}).
 *
 * With two more arguments, rank {@code secondRank} kills itself {@code secondDelayMillis} after that same step, while
 * the others rebuild their group without the first (a death during the rebuild). With {@code zero=STAGE} instead, it
 * trains with ZeRO {@code sharding(STAGE)} and a periodic checkpoint every {@code every} steps into
 * {@code checkpointDir} (all kept), to which the survivors of a death go back. With {@code hsdp=S} it trains with
 * hybrid sharding (stage 3 in shard groups of S ranks, replicated across them): the dead rank's shard group leaves
 * (its live ranks print {@code LEFT} and end with status 0) and the other groups go on from their own copy; with two
 * more arguments, rank {@code secondRank} kills itself after step {@code secondAfterStep} too (a second shrink).
 *
 * <pre>ShrinkingTraining modelFile killRank killAfterStep(-1: none) [secondRank secondDelayMillis]
 * ShrinkingTraining modelFile killRank killAfterStep zero=STAGE checkpointDir every
 * ShrinkingTraining modelFile killRank killAfterStep hsdp=S [secondRank secondAfterStep]</pre>
 */
public final class ShrinkingTraining {

    private ShrinkingTraining() {
    }

    /** 48 batches of 16: 16 steps for 3 ranks, 24 for 2. */
    static List<DataSet> batches() {
        return new SyntheticData(64, 10, 1).batches(2, 48, 16, DataType.FLOAT);
    }

    /** The example's MLP, as every rank and the test's reference build it. */
    static MultiLayerNetwork network() {
        return DataParallelExample.mlp(64, 32, 10);
    }

    public static void main(String[] args) throws IOException {
        File model = new File(args[0]);
        int killRank = Integer.parseInt(args[1]);
        long killAfter = Long.parseLong(args[2]);
        boolean zero = args.length > 3 && args[3].startsWith("zero=");
        int hsdp = args.length > 3 && args[3].startsWith("hsdp=") ? Integer.parseInt(args[3].substring(5)) : 0;
        int extra = hsdp > 0 ? 4 : 3; // where a second kill's two arguments start
        int secondRank = args.length > extra + 1 && !zero ? Integer.parseInt(args[extra]) : -1;
        // without hybrid sharding, the second kill's delay after the first's step (a death during the rebuild); with
        // it, the step after which the second rank kills itself (a second shrink)
        long second = args.length > extra + 1 && !zero ? Long.parseLong(args[extra + 1]) : 0;
        long secondAfter = hsdp > 0 ? second : killAfter;
        long secondDelay = hsdp > 0 ? 0 : second;
        System.out.println("PID " + ProcessHandle.current().pid());
        ProcessGroup group = ProcessGroup.fromEnvironment();
        int launchRank = group.rank();
        MultiLayerNetwork net = network();
        SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(net).group(group).ompThreadsPerWorker(1)
                .onWorkerFailure(WorkerFailure.SHRINK).minWorkers(2)
                .stepListener(report -> {
                    if (launchRank == killRank && report.step() == killAfter) {
                        System.out.printf(Locale.ROOT, "KILL rank %d after step %d at %d ms%n", launchRank, report.step(),
                                System.currentTimeMillis());
                        System.out.flush();
                        RestartingTraining.killMyself();
                    }
                    if (launchRank == secondRank && report.step() == secondAfter) {
                        try {
                            Thread.sleep(secondDelay);
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                        if (hsdp > 0) { // a second shrink's kill, as the first's
                            System.out.printf(Locale.ROOT, "KILL rank %d after step %d at %d ms%n", launchRank,
                                    report.step(), System.currentTimeMillis());
                        } else {
                            System.out.printf(Locale.ROOT, "KILL rank %d %d ms after step %d at %d ms%n", launchRank,
                                    secondDelay, report.step(), System.currentTimeMillis());
                        }
                        System.out.flush();
                        RestartingTraining.killMyself();
                    }
                });
        if (zero) {
            builder.sharding(ZeroStage.valueOf(args[3].substring("zero=".length())))
                    .checkpointEvery(Integer.parseInt(args[5]), Path.of(args[4])).keepCheckpoints(1000);
        }
        if (hsdp > 0) {
            builder.sharding(ZeroStage.PARAMETERS).shardGroupSize(hsdp);
        }
        boolean left = false;
        try (group; SymmemParallelWrapper wrapper = builder.build()) {
            try {
                wrapper.fit(new ListIterator(batches()));
            } catch (ReplicaLostException e) { // hybrid sharding: a rank of this shard group died, this rank leaves
                System.out.printf(Locale.ROOT, "LEFT launch rank %d at %d ms: %s%n", launchRank,
                        System.currentTimeMillis(), e.getMessage());
                left = true;
            } catch (RuntimeException e) {
                System.out.printf(Locale.ROOT, "FIT FAILED at %d ms: %s%n", System.currentTimeMillis(), e.getMessage());
                System.out.flush();
                throw e;
            }
            long nowNanos = System.nanoTime();
            long nowMillis = System.currentTimeMillis();
            for (ShrinkReport s : left ? List.<ShrinkReport>of() : wrapper.shrinks()) {
                System.out.printf(Locale.ROOT, "SHRUNK step %d dead %s from %d to %d redone %b resumed at %d ms"
                        + " back to step %d checkpoint %s%n", s.step(), s.dead(), s.workersBefore(), s.workersAfter(),
                        s.redone(), nowMillis - (nowNanos - s.resumedNanos()) / 1_000_000, s.resumedAt(),
                        s.checkpoint());
            }
            if (!left) {
                System.out.printf(Locale.ROOT, "DONE launch rank %d, %d workers at the end, %d iterations%n",
                        launchRank, wrapper.workers(), net.getIterationCount());
                System.out.println("MAPPED after fit " + mappedSharedMemoryOwners());
            }
            if (!left && (wrapper.shrinks().isEmpty()
                    || launchRank == firstSurvivor(Math.max(1, hsdp), killRank, hsdp > 0 ? secondRank : -1))) {
                ModelSerializer.writeModel(net, model, true);
            }
        }
        System.out.println("MAPPED after close " + mappedSharedMemoryOwners());
    }

    /**
     * The pids whose shared-memory files this process still maps ({@code /proc/self/maps}; the files themselves are
     * unlinked once mapped, so a mapping is what keeps their pages in /dev/shm): after a shrink, no file of the dead
     * rank's, nor of the old group's.
     */
    static java.util.SortedSet<Long> mappedSharedMemoryOwners() throws IOException {
        java.util.SortedSet<Long> owners = new java.util.TreeSet<>();
        java.util.regex.Pattern file = java.util.regex.Pattern.compile("/symmem4j-(\\d+)-");
        for (String line : java.nio.file.Files.readAllLines(Path.of("/proc/self/maps"))) {
            java.util.regex.Matcher m = file.matcher(line);
            if (m.find()) {
                owners.add(Long.parseLong(m.group(1)));
            }
        }
        return owners;
    }

    /**
     * The lowest launch rank not in any {@code killed} rank's group of {@code groupSize} ranks (1 without hybrid
     * sharding; its shard group leaves with it): rank 0 of the survivors' group. A killed rank below 0 kills nobody.
     */
    private static int firstSurvivor(int groupSize, int... killed) {
        int first = 0;
        while (first / groupSize == killed[0] / groupSize || killed.length > 1 && killed[1] >= 0
                && first / groupSize == killed[1] / groupSize) {
            first += groupSize;
        }
        return first;
    }
}
