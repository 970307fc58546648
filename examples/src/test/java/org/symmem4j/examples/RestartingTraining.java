package org.symmem4j.examples;

import java.io.File;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.train.CheckpointDirectory;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of the data-parallel job that {@link RestartAfterKillTest} and {@link RestartSoak} start with
 * {@code symmem4j-run --max-restarts N}: it trains the example's MLP with checkpoints every K steps that it resumes
 * from ({@code .checkpointEvery(K, dir).resumeFrom(dir)}), and injects the faults it is given, each in one generation
 * ({@code SYMMEM4J_RESTART_GENERATION}) on one rank:
 * <ul>
 *   <li>{@code kill@g<G>r<R>s<S>}: {@code kill -9} of itself after step S (S steps completed);</li>
 *   <li>{@code stop@g<G>r<R>s<S>}: {@code kill -STOP} of itself after step S: a rank that hangs rather than dies;</li>
 *   <li>{@code node@g<G>r<R>s<S>}: {@code kill -9} of its launcher (its parent process), then of itself, after step S:
 *       a machine of a {@code --nnodes MIN:MAX} job that is gone ({@link ElasticNodesRestartTest});</li>
 *   <li>{@code setup@g<G>r<R>}: {@code kill -9} of itself before it joins the group (its peers wait in the
 *       rendezvous);</li>
 *   <li>{@code halt@g<G>s<S>}: rank 0, which writes every checkpoint's manifest, halts in the middle of writing step
 *       S's ({@link CheckpointDirectory#HALT_WRITING_PROPERTY}): a torn checkpoint, which the next generation must
 *       skip.</li>
 * </ul>
 * It prints, with wall-clock milliseconds: its start and pid, each fault, the progress the previous generation
 * recorded and what it resumed from, its first step; rank 0 writes the final model with {@link ModelSerializer}.
 *
 * <p>Resume on another worker count: start it again with another {@code -n} on the same checkpoint directory (as
 * {@link ResumeOnAnotherWorkerCountTest} does after a failed 2-rank job, on 3): the wrapper re-shards the checkpoint of
 * N ranks onto the M it runs and goes on at the same batch of the data (every rank count deals the same batches in
 * the same order); it prints {@code RESHARDED from N to M ranks at step S} first.
 *
 * <pre>RestartingTraining checkpointDir modelFile everyK epochs [timeout=MS] [ZERO_STAGE] [fault ...]</pre>
 * (for compatibility, a lone number as the fifth argument is {@code kill@g0r1s<number>}, -1 none). With a ZeRO stage
 * ({@code OPTIMIZER_STATE} or {@code GRADIENTS}) each rank keeps the updater state of its shard only, and the
 * checkpoints hold one shard file per rank.
 */
public final class RestartingTraining {

    /** Where {@code node@...} writes the wall-clock milliseconds of its kill, when set. */
    static final String NODE_MARK_ENV = "RESTARTING_TRAINING_NODE_MARK";

    private static final Pattern FAULT = Pattern.compile("(kill|stop|node|setup|halt)@g(\\d+)(?:r(\\d+))?(?:s(\\d+))?");

    /** A fault to inject: what, in which generation, on which rank, after which step (-1 where it has none). */
    record Fault(String what, int generation, int rank, long step) {
        static Fault parse(String spec) {
            Matcher m = FAULT.matcher(spec);
            if (!m.matches()) {
                throw new IllegalArgumentException("fault '" + spec + "': expected kill@g<G>r<R>s<S>, stop@g<G>r<R>s<S>,"
                        + " setup@g<G>r<R> or halt@g<G>s<S>");
            }
            String what = m.group(1);
            boolean needsRank = !what.equals("halt");
            boolean needsStep = !what.equals("setup");
            if (needsRank != (m.group(3) != null) || needsStep != (m.group(4) != null)) {
                throw new IllegalArgumentException("fault '" + spec + "': " + what + (needsRank ? " needs" : " takes no")
                        + " r<rank> and " + (needsStep ? "needs" : "takes no") + " s<step>");
            }
            return new Fault(what, Integer.parseInt(m.group(2)), needsRank ? Integer.parseInt(m.group(3)) : 0,
                    needsStep ? Long.parseLong(m.group(4)) : -1);
        }

        boolean here(String kind, int gen, int r) {
            return what.equals(kind) && generation == gen && rank == r;
        }
    }

    private RestartingTraining() {
    }

    /** 24 batches of 16: 12 steps per epoch for 2 ranks. */
    static List<DataSet> batches() {
        return new SyntheticData(64, 10, 1).batches(2, 24, 16, DataType.FLOAT);
    }

    public static void main(String[] args) throws IOException {
        long started = System.currentTimeMillis();
        Path checkpoints = Path.of(args[0]);
        File model = new File(args[1]);
        int every = Integer.parseInt(args[2]);
        int epochs = Integer.parseInt(args[3]);
        Duration timeout = null;
        ZeroStage sharding = null;
        List<Fault> faults = new ArrayList<>();
        for (int i = 4; i < args.length; i++) {
            if (args[i].startsWith("timeout=")) {
                timeout = Duration.ofMillis(Long.parseLong(args[i].substring("timeout=".length())));
            } else if (isZeroStage(args[i])) {
                sharding = ZeroStage.valueOf(args[i]);
            } else if (args[i].matches("-?\\d+")) {
                if (Long.parseLong(args[i]) >= 0) {
                    faults.add(new Fault("kill", 0, 1, Long.parseLong(args[i])));
                }
            } else {
                faults.add(Fault.parse(args[i]));
            }
        }
        int generation = Integer.parseInt(System.getenv().getOrDefault("SYMMEM4J_RESTART_GENERATION", "0"));
        int envRank = Integer.parseInt(System.getenv().getOrDefault("RANK", "0"));
        System.out.printf(Locale.ROOT, "START rank %d generation %d pid %d at %d ms%n", envRank, generation,
                ProcessHandle.current().pid(), started);
        for (Fault f : faults) {
            if (f.here("setup", generation, envRank)) {
                System.out.printf(Locale.ROOT, "KILL rank %d generation %d in setup at %d ms%n", envRank, generation,
                        System.currentTimeMillis());
                signalMyself("-9");
            }
            if (f.here("halt", generation, 0) && envRank == 0) {
                // the writer halts in the middle of this step's manifest (this generation only: the next one writes it)
                System.setProperty(CheckpointDirectory.HALT_WRITING_PROPERTY,
                        CheckpointDirectory.stepDir(Path.of(""), f.step()).resolve(CheckpointDirectory.MANIFEST).toString());
            }
        }
        long progress = CheckpointDirectory.progress(checkpoints); // what the previous generation reached
        List<DataSet> data = batches();
        MultiLayerNetwork net = DataParallelExample.mlp(64, 32, 10);
        long made = System.currentTimeMillis(); // ND4J's native libraries load with the first network
        // the group's collectives are where a rank waits for a peer: the timeout is the group's (the trainer takes
        // it); it bounds the set-up exchanges too, so the ranks join once ND4J is loaded, the slow part of a start
        ProcessGroup group = timeout == null ? ProcessGroup.fromEnvironment()
                : ProcessGroup.fromEnvironment(GroupOptions.defaults().withTimeout(timeout));
        long grouped = System.currentTimeMillis();
        int rank = group.rank();
        SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(net).group(group).ompThreadsPerWorker(1)
                .checkpointEvery(every, checkpoints).resumeFrom(checkpoints)
                .stepListener(faultsAfterSteps(faults, generation, rank));
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
            if (rank == 0 && generation > 0) {
                long from = wrapper.resumedFrom() == null ? 0 : wrapper.resumedFrom().counters().step();
                System.out.printf(Locale.ROOT, "REDONE generation %d: progress %d, resumed from step %d, %d steps redone%n",
                        generation, progress, from, Math.max(0, progress - from));
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

    /**
     * The step listener of a restarting run: prints the generation's first step ({@code FIRST STEP S of generation G at
     * T ms}) and injects {@code rank}'s faults after each step ({@link #injectAfterStep}).
     */
    static SymmemParallelWrapper.StepListener faultsAfterSteps(List<Fault> faults, int generation, int rank) {
        boolean[] first = {true};
        return report -> {
            long step = report.step() + 1; // steps completed, as a checkpoint counts them
            if (first[0]) {
                first[0] = false;
                System.out.printf(Locale.ROOT, "FIRST STEP %d of generation %d at %d ms%n", step, generation,
                        System.currentTimeMillis());
            }
            injectAfterStep(faults, generation, rank, step);
        };
    }

    /**
     * The {@code kill} and {@code stop} faults of {@code rank} in {@code generation} after {@code step}: each printed
     * ({@code KILL rank R generation G after step S at T ms}), then its signal sent to this JVM.
     */
    static void injectAfterStep(List<Fault> faults, int generation, int rank, long step) {
        for (Fault f : faults) {
            boolean node = f.here("node", generation, rank);
            if (f.step() == step && (f.here("kill", generation, rank) || f.here("stop", generation, rank) || node)) {
                System.out.printf(Locale.ROOT, "%s rank %d generation %d after step %d at %d ms%n",
                        f.what().toUpperCase(Locale.ROOT), rank, generation, step, System.currentTimeMillis());
                if (node) { // the launcher first: its machine is gone, not only this process
                    System.out.flush();
                    String mark = System.getenv(NODE_MARK_ENV); // the launcher dies with this line maybe unread
                    if (mark != null) {
                        try {
                            java.nio.file.Files.writeString(Path.of(mark), Long.toString(System.currentTimeMillis()));
                        } catch (IOException e) {
                            System.out.println("cannot write " + mark + ": " + e);
                        }
                    }
                    ProcessHandle.current().parent().ifPresent(ProcessHandle::destroyForcibly);
                }
                signalMyself(f.what().equals("stop") ? "-STOP" : "-9");
            }
        }
    }

    private static boolean isZeroStage(String arg) {
        for (ZeroStage z : ZeroStage.values()) {
            if (z.name().equals(arg)) {
                return true;
            }
        }
        return false;
    }

    /** kill -9 of this JVM's own pid: no shutdown hook, no close, as a crash or the OOM killer would. */
    static void killMyself() {
        signalMyself("-9");
    }

    /**
     * {@code kill -9} (no shutdown hook, no close, as a crash or the OOM killer would) or {@code kill -STOP} (a hang)
     * of this JVM's own pid; without kill(1), a halt, as abrupt as a kill.
     */
    private static void signalMyself(String signal) {
        System.out.flush();
        try {
            new ProcessBuilder("kill", signal, Long.toString(ProcessHandle.current().pid())).inheritIO().start().waitFor();
            if (signal.equals("-STOP")) {
                return; // stopped until SIGCONT or SIGKILL; should it go on, it goes on training
            }
            Thread.sleep(60_000); // the signal lands while this waits
        } catch (IOException | InterruptedException e) {
            // no kill(1): halt instead, as abruptly
        }
        Runtime.getRuntime().halt(137);
    }
}
