package org.symmem4j.launch;

import java.io.IOException;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.NetworkInterface;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.GeneralSecurityException;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * {@code symmem4j-run}: starts this machine's processes of a job — one per worker or GPU — with
 * torchrun's variables, the job's id and secret, each bound to its own slice of the CPUs, and stops
 * them all when one fails, naming it; with {@code --max-restarts N} it then starts the job again, up to N
 * times, each time as a new generation with its own run id, port and secret; with {@code --on-failure shrink} the
 * others go on without the dead process instead, told through a membership file, and re-form their group in place
 * (docs/shrink.md). See {@link LaunchPlan} for what each process gets and {@link Supervisor} for how they are watched.
 *
 * <pre>
 *   symmem4j-run --standalone --nproc-per-node 4 --java -cp app.jar com.example.Train
 *   symmem4j-run --nproc-per-node gpu -- ./train.sh
 *   symmem4j-run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --run-id job7 --secret-file s -n 8 --java ...
 *   symmem4j-run -n 4 --max-restarts 3 --java -cp app.jar com.example.Train
 *   symmem4j-run -n 4 --on-failure shrink --java -cp app.jar com.example.Train
 *   symmem4j-run --nnodes 2:3 --max-restarts 3 --master-addr 10.0.0.1 --run-id job7 --secret-file s -n 8 --java ...
 * </pre>
 * With {@code --nnodes MIN:MAX} the launchers meet before each generation in a rendezvous that node 0's launcher hosts
 * ({@link NodeRendezvous}, {@link RendezvousHost}), which assigns the node ranks and leaves out a machine that is gone.
 */
@Command(name = "symmem4j-run", mixinStandardHelpOptions = true, versionProvider = Launcher.Version.class,
        sortOptions = false, showDefaultValues = true, usageHelpWidth = 110,
        description = {"Starts this machine's processes of a job, one per worker or GPU, with torchrun's variables"
                + " (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), the job's id"
                + " (SYMMEM4J_RUN_ID) and secret (SYMMEM4J_SECRET_FILE); binds each to its own slice of the CPUs"
                + " (taskset, OMP_NUM_THREADS); prefixes their output with their rank; and when one exits with an error"
                + " or is killed, stops the others (SIGTERM, then SIGKILL after the grace period) and exits with its"
                + " code, naming it, unless --max-restarts lets it start the job again. SIGINT or SIGTERM to the"
                + " launcher stops every process the same way.",
                "", "A process's GPU is LOCAL_RANK mod the GPUs (every GPU stays visible: peer access and NCCL need them).",
                "", "torchrun's spellings work too: --nproc_per_node, --node_rank, --master_addr, --master_port,"
                + " --max_restarts, --rdzv-id/--rdzv_id (= --run-id), --log_dir."},
        footer = {"", "Examples:",
                "  symmem4j-run --standalone --nproc-per-node 4 --java -cp app.jar com.example.Train --epochs 3",
                "  symmem4j-run -n gpu -- ./train.sh",
                "  node 0: symmem4j-run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --run-id job7 --secret-file s -n 8 ...",
                "  node 1: symmem4j-run --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --run-id job7 --secret-file s -n 8 ...",
                "  symmem4j-run -n 4 --max-restarts 3 --java -cp app.jar com.example.Train   # resumes from its checkpoints",
                "  every machine: symmem4j-run --nnodes 2:3 --max-restarts 3 --master-addr 10.0.0.1 --run-id job7"
                        + " --secret-file s -n 8 ...   # goes on without a machine that is gone",
                "  symmem4j-run -n 4 --on-failure shrink --java -cp app.jar com.example.Train   # survivors go on in place",
                "", "Subcommands (the first argument; symmem4j-run -- doctor runs a program named doctor):",
                "  symmem4j-run doctor [--help]          what symmem4j will choose here and how fast it is (docs/doctor.md)",
                "  symmem4j-run flight-report DUMP...    merges the flight-recorder dumps of every rank (docs/flight-recorder.md)",
                "", "Exit status: 0 when every process (of the last generation) exited 0; the first failed process's code"
                + " (with --max-restarts, of the last generation); 2 for a bad request."})
public final class Launcher implements Callable<Integer> {

    @Option(names = {"-n", "--nproc-per-node", "--nproc_per_node"}, paramLabel = "N|gpu|cpu|MIN:MAX", defaultValue = "1",
            description = "processes on this machine: a number, gpu (one per GPU), cpu (one per CPU), or MIN:MAX"
                    + " (torchrun's elastic --nnodes=MIN:MAX, for this machine's processes; with --max-restarts): start"
                    + " MAX; when a process's slot fails again after its restart, the next generation runs one fewer,"
                    + " down to MIN, and the trainers resume from their checkpoints re-sharded")
    String nprocPerNode;

    @Option(names = "--nnodes", paramLabel = "N|MIN:MAX", defaultValue = "1",
            description = "machines in the job; MIN:MAX (torchrun's elastic --nnodes, with --max-restarts): before each"
                    + " generation the launchers meet in a rendezvous hosted by node 0's launcher (the one that can bind"
                    + " --master-addr at port --master-port + --max-restarts + 1); it closes when MAX joined, or MIN and"
                    + " --rdzv-last-call passed, and assigns the node ranks (--node-rank is refused): a machine that is"
                    + " gone is left out. Node 0 is fixed: when it is gone the job ends")
    String nnodesValue;

    /** MAX of {@code --nnodes}, or its one number. */
    int nnodes;

    @Option(names = {"--rdzv-last-call", "--rdzv_last_call"}, paramLabel = "SECONDS", defaultValue = "10",
            description = "with --nnodes MIN:MAX: how long a round stays open for more machines once MIN joined"
                    + " (torchrun's last call, 30 s there)")
    double lastCallSeconds;

    @Option(names = {"--rdzv-timeout", "--rdzv_timeout"}, paramLabel = "SECONDS", defaultValue = "600",
            description = "with --nnodes MIN:MAX: how long a launcher tries to reach node 0's, and a round may stay open"
                    + " before it fails for too few machines (torchrun's join timeout)")
    double rdzvTimeoutSeconds;

    @Option(names = {"--node-rank", "--node_rank"}, paramLabel = "I", defaultValue = "0", description = "this machine's index, 0..nnodes-1")
    int nodeRank;

    @Option(names = {"--master-addr", "--master_addr"}, paramLabel = "ADDR", defaultValue = "127.0.0.1",
            description = "where rank 0 hosts the rendezvous store (node 0's address)")
    String masterAddr;

    @Option(names = {"--master-port", "--master_port"}, paramLabel = "PORT", defaultValue = "29500",
            description = "the store's port")
    int masterPort;

    @Option(names = "--standalone",
            description = "a job of this machine alone, as torchrun's --standalone: the store on 127.0.0.1 at a free"
                    + " port the launcher picks (instead of --master-port) and a fresh run id; refused with"
                    + " --nnodes > 1, --node-rank, --master-addr or --master-port")
    boolean standalone;

    @Option(names = {"--run-id", "--rdzv-id", "--rdzv_id"}, paramLabel = "ID",
            description = "the job's id, the same on every machine (default: SYMMEM4J_RUN_ID, else a fresh one; required"
                    + " with --nnodes > 1)")
    String runId;

    @Option(names = "--secret-file", paramLabel = "FILE",
            description = "the job's store secret (mode 0600; the same on every machine). Default: SYMMEM4J_SECRET or"
                    + " SYMMEM4J_SECRET_FILE from the environment, else, on one machine, a fresh one in a private"
                    + " temporary file removed at the end")
    Path secretFile;

    @Option(names = "--cpu-bind", paramLabel = "auto|none", defaultValue = "auto", converter = CpuBindConverter.class,
            description = "auto: each process gets a contiguous slice of the launcher's CPUs (taskset -c) and"
                    + " OMP_NUM_THREADS equal to it, unless set; none: processes share every CPU")
    LaunchSpec.CpuBind cpuBind;

    @Option(names = "--java",
            description = "the command is arguments of this launcher's JDK: it runs <java.home>/bin/java with the flags"
                    + " symmem4j and DL4J need (--enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector"
                    + " --sun-misc-unsafe-memory-access=allow)")
    boolean java;

    @Option(names = {"--log-dir", "--log_dir"}, paramLabel = "DIR", description = "also write each process's output to DIR/rank-N.log")
    Path logDir;

    @Option(names = "--grace-period", paramLabel = "SECONDS", defaultValue = "10",
            description = "how long stopped processes get after SIGTERM before SIGKILL")
    int graceSeconds;

    @Option(names = {"--max-restarts", "--max_restarts"}, paramLabel = "N", defaultValue = "0",
            description = "when a process fails, stop the others and start the job again, up to N times (torchrun's"
                    + " --max-restarts): same command, a new generation g with run id <run id>-g<g>, port"
                    + " --master-port + g and a new secret; SYMMEM4J_RESTART_GENERATION and TORCHELASTIC_RESTART_COUNT"
                    + " say g (on one machine, when port --master-port + g is in use, a free one the system chooses; on node 0"
                    + " of several machines, the job ends saying so). A program resumes from its newest complete checkpoint"
                    + " (the trainers' resumeFrom)")
    int maxRestarts;

    @Option(names = "--on-failure", paramLabel = "stop|shrink", defaultValue = "stop",
            description = "stop: when a process fails, stop the others (and restart with --max-restarts); shrink: the"
                    + " others go on without it, told through a membership file (SYMMEM4J_MEMBERSHIP_FILE) that lists"
                    + " the dead ranks, so that trainers built with onWorkerFailure(SHRINK) re-form their group in place;"
                    + " the job exits 0 when a survivor exits 0. One machine, without --max-restarts")
    String onFailure;

    @Option(names = "--restart-delay", paramLabel = "SECONDS", defaultValue = "1",
            description = "the pause between stopping a failed generation and starting the next")
    double restartDelaySeconds;

    @Option(names = "--dry-run", description = "print each process's command line and variables; start nothing")
    boolean dryRun;

    @Parameters(paramLabel = "COMMAND", arity = "0..*",
            description = "the program and its arguments (after --, or after the first word that is not an option)")
    List<String> command = new ArrayList<>();

    @Spec
    CommandSpec commandSpec;

    private final PrintStream out;
    private final PrintStream err;
    private final Map<String, String> env;

    Launcher(PrintStream out, PrintStream err, Map<String, String> env) {
        this.out = out;
        this.err = err;
        this.env = env;
    }

    /**
     * Runs the launcher; exits with its status.
     *
     * @param args the command line, see {@code --help}
     */
    public static void main(String[] args) {
        System.exit(run(args, System.out, System.err, System.getenv()));
    }

    /**
     * Runs the launcher in this JVM, as {@link #main} does, without exiting: for tests and for programs
     * that start jobs themselves.
     *
     * @param args the command line, see {@code --help}
     * @param out  where the processes' output goes, each line prefixed with its rank
     * @param err  where the launcher's own messages go
     * @param env  the environment the processes inherit, and that the launcher reads
     *             ({@code SYMMEM4J_SECRET}, {@code SYMMEM4J_RUN_ID}, {@code OMP_NUM_THREADS}, {@code PATH}, ...)
     * @return the launcher's exit status: 0 when every process exited 0, the first failed process's code,
     *         2 for a bad request
     */
    public static int run(String[] args, PrintStream out, PrintStream err, Map<String, String> env) {
        java.util.OptionalInt subcommand = Subcommands.run(args, out, err, env);
        if (subcommand.isPresent()) {
            return subcommand.getAsInt();
        }
        // the command is everything from its first word on, options of its own included (java -cp ...)
        CommandLine cl = new CommandLine(new Launcher(out, err, env)).setStopAtPositional(true)
                .setUnmatchedOptionsArePositionalParams(true);
        cl.setOut(new PrintWriter(out, true));
        cl.setErr(new PrintWriter(err, true));
        cl.setExecutionExceptionHandler((e, cmd, parsed) -> {
            if (e instanceof IllegalArgumentException) {
                err.println("symmem4j-run: " + e.getMessage());
                return 2;
            }
            throw e;
        });
        return cl.execute(args);
    }

    /**
     * What a launch run in this JVM ended with ({@link #runCapturing}).
     *
     * @param status the launcher's exit status
     * @param out    the processes' output, each line prefixed with its rank
     * @param err    the launcher's own messages
     */
    public record Result(int status, String out, String err) {
    }

    /**
     * {@code env} without the variables that name a job ({@code SYMMEM4J_RUN_ID}, {@code SYMMEM4J_SECRET},
     * {@code SYMMEM4J_SECRET_FILE}): for a new job started from inside a running one (a launched process,
     * or a test run under a launcher), which would otherwise inherit the outer job's identity.
     *
     * @param env an environment
     * @return a copy without the job's identity
     */
    public static Map<String, String> newJobEnvironment(Map<String, String> env) {
        Map<String, String> fresh = new java.util.HashMap<>(env);
        fresh.remove(LaunchPlan.RUN_ID_ENV);
        fresh.remove(LaunchPlan.SECRET_ENV);
        fresh.remove(LaunchPlan.SECRET_FILE_ENV);
        return fresh;
    }

    /**
     * As {@link #run}, with the output and messages kept and returned.
     *
     * @param args the command line, see {@code --help}
     * @param env  the environment the processes inherit, and that the launcher reads
     * @return the exit status, the processes' output and the launcher's messages
     */
    public static Result runCapturing(List<String> args, Map<String, String> env) {
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        java.io.ByteArrayOutputStream err = new java.io.ByteArrayOutputStream();
        int status = run(args.toArray(String[]::new), new PrintStream(out, true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8), env);
        return new Result(status, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    @Override
    public Integer call() throws IOException {
        if (graceSeconds < 0) {
            throw new IllegalArgumentException("--grace-period=" + graceSeconds + " must be >= 0 (seconds; fix:"
                    + " pass e.g. --grace-period 30)");
        }
        if (!(restartDelaySeconds >= 0 && restartDelaySeconds <= 3600)) {
            throw new IllegalArgumentException("--restart-delay=" + restartDelaySeconds + " outside [0, 3600] seconds"
                    + " (fix: pass e.g. --restart-delay 1, or 0 to restart at once)");
        }
        if (!java && !command.isEmpty() && command.getFirst().startsWith("-")) {
            throw new IllegalArgumentException("the command starts with '" + command.getFirst() + "', which is no option of"
                    + " the launcher (see --help): expected a program (fix: put the launcher's options first and the"
                    + " program after them, or after --, or use --java to give arguments of java)");
        }
        int[] nodes = LaunchPlan.nodeRange(nnodesValue);
        nnodes = nodes[1];
        boolean elastic = nnodesValue.contains(":");
        if (elastic) {
            checkElasticOptions();
        }
        if (standalone) {
            standalone();
        }
        boolean shrink = switch (onFailure.strip().toLowerCase(Locale.ROOT)) {
            case "stop" -> false;
            case "shrink" -> true;
            default -> throw new IllegalArgumentException("--on-failure=" + onFailure + ": expected stop or shrink (fix:"
                    + " pass --on-failure stop, or --on-failure shrink to go on with the ranks left)");
        };
        if (shrink && maxRestarts > 0) {
            throw new IllegalArgumentException("--on-failure shrink with --max-restarts " + maxRestarts + ": a shrinking job"
                    + " goes on without its dead ranks instead of starting again; expected one of the two (fix: drop"
                    + " --max-restarts, or --on-failure stop)");
        }
        if (shrink && nnodes > 1) {
            throw new IllegalArgumentException("--on-failure shrink with --nnodes " + nnodes + ": the dead ranks are"
                    + " announced in a file on this machine, which the other machines' processes cannot read; expected"
                    + " --nnodes 1 (fix: --on-failure stop, with --max-restarts to restart)");
        }
        if (shrink && nprocPerNode != null && nprocPerNode.contains(":")) {
            throw new IllegalArgumentException("--on-failure shrink with --nproc-per-node " + nprocPerNode + ": a shrinking"
                    + " job already goes on with fewer processes, in place; a range is for restarts; expected one of the"
                    + " two (fix: --nproc-per-node " + nprocPerNode.substring(nprocPerNode.indexOf(':') + 1).trim()
                    + ", or --on-failure stop with --max-restarts)");
        }
        if (logDir != null) {
            Files.createDirectories(logDir);
        }
        LaunchSpec spec = new LaunchSpec(nprocPerNode, nnodes, nodeRank, masterAddr, masterPort, runId, cpuBind,
                secretFile, java, command, maxRestarts, elastic ? nodes[0] : 0);
        Machine machine = Machine.discover(env);
        boolean generateSecret = LaunchPlan.needsGeneratedSecret(spec, env);
        Path secretDir = (generateSecret || maxRestarts > 0 || shrink) && !dryRun ? privateDirectory() : null;
        Thread hook = null;
        RendezvousHost rdzvHost = null;
        NodeRendezvous.Member rdzv = null;
        try {
            Path generated = secretDir == null || !generateSecret ? null : writeSecret(secretDir, "secret");
            String javaBin = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            String freshRunId = freshRunId();
            LaunchPlan plan = LaunchPlan.of(spec, machine, env, javaBin, generated, freshRunId);
            err.println("symmem4j-run: " + plan.ranks().size() + " process(es) here, " + (elastic ? "ranks from the"
                    + " rendezvous" : "ranks " + plan.ranks().getFirst().rank() + ".." + plan.ranks().getLast().rank()
                    + " of " + plan.worldSize()) + ", run id " + plan.runId()
                    + (plan.ranks().getFirst().cpus().isEmpty() ? "" : ", CPUs " + cpuSummary(plan))
                    + (maxRestarts > 0 ? ", at most " + maxRestarts + " restart(s)" : "")
                    + (shrink ? ", on failure the others go on without the dead rank (--on-failure shrink)" : ""));
            for (String note : plan.notes()) {
                err.println("symmem4j-run: note: " + note);
            }
            if (dryRun) {
                for (LaunchPlan.RankLaunch r : plan.ranks()) {
                    out.println("rank " + r.rank() + ": " + r.env() + " " + String.join(" ", r.command()));
                }
                return 0;
            }
            Generations generations = new Generations();
            hook = Thread.ofPlatform().unstarted(() -> {
                List<String> stopped = generations.interrupt();
                if (!stopped.isEmpty()) {
                    err.println("symmem4j-run: interrupted; stopped " + String.join(", ", stopped));
                }
                deleteQuietly(secretDir);
            });
            Runtime.getRuntime().addShutdownHook(hook);
            // read now, so that an unreadable secret fails the request before anything starts
            byte[] givenSecret = maxRestarts > 0 && !generateSecret ? baseSecret(spec) : null;
            String firstRunId = plan.runId();
            if (elastic) {
                int rdzvPort = NodeRendezvous.port(spec);
                byte[] key = NodeRendezvous.key(givenSecret, firstRunId);
                String id = NodeRendezvous.launcherId();
                Duration lastCall = Duration.ofNanos((long) (lastCallSeconds * 1e9));
                Duration timeout = Duration.ofNanos((long) (rdzvTimeoutSeconds * 1e9));
                rdzvHost = RendezvousHost.bind(masterAddr, rdzvPort, key, id, plan.localWorldSize(), nodes[0], nodes[1],
                        lastCall, timeout, err);
                err.println("symmem4j-run: " + (rdzvHost != null ? "hosting the rendezvous at " + masterAddr + ":" + rdzvPort
                        + ": this machine is node 0" : "joining the rendezvous at " + masterAddr + ":" + rdzvPort)
                        + " (--nnodes " + nnodesValue + ", last call " + lastCallSeconds + " s)");
                NodeRendezvous.Assignment a;
                try {
                    rdzv = NodeRendezvous.Member.connect(masterAddr, rdzvPort, key, id, plan.localWorldSize(), timeout);
                    a = rdzv.join(0, lastCall);
                } catch (IllegalStateException e) {
                    Runtime.getRuntime().removeShutdownHook(hook);
                    err.println("symmem4j-run: no generation 0: " + e.getMessage());
                    return 1;
                }
                err.println("symmem4j-run: generation 0: node " + a.nodeRank() + " of " + a.nnodes() + "; " + a.note());
                spec = spec.withNodes(a.nnodes(), a.nodeRank());
                plan = LaunchPlan.of(spec, machine, env, javaBin, generated, freshRunId);
            }
            Path ownSecret = generated; // the secret file this launcher made for the generation that runs
            Path previousSecret = null;
            int minProcesses = LaunchPlan.processRange(spec.nprocPerNode(), machine)[0];
            int previousFailedSlot = -1; // the local rank whose process failed the generation before, -1: none
            while (true) {
                Supervisor supervisor = new Supervisor(plan, out, logDir, Duration.ofSeconds(graceSeconds), env,
                        shrink ? secretDir.resolve("membership") : null, err);
                if (!generations.begin(supervisor)) {
                    return 130; // the hook stops what runs and says so
                }
                if (previousSecret != null) {
                    Files.deleteIfExists(previousSecret); // the old generation is gone: its secret has no use left
                }
                if (rdzv != null) {
                    rdzv.watch(plan.generation(), supervisor);
                }
                Supervisor.Outcome outcome = supervisor.run();
                if (rdzv != null && outcome.exitCode() == 0) {
                    rdzv.done(plan.generation());
                } else if (rdzv != null && outcome.failedRank() >= 0) {
                    rdzv.failed(plan.generation(), outcome.message()); // the host stops the other machines' processes
                }
                int left = maxRestarts - plan.generation();
                if (outcome.exitCode() == 0 || !outcome.restartable() || generations.interrupted()) {
                    return finish(hook, outcome, outcome.exitCode() == 0 || maxRestarts == 0 || !outcome.restartable() ? ""
                            : "; interrupted, not restarted", maxRestarts == 0 ? "" : "generation " + plan.generation()
                            + (outcome.exitCode() == 0 ? ": " : " failed: "));
                }
                if (left == 0) {
                    return finish(hook, outcome, maxRestarts == 0 ? "" : "; no restarts left (--max-restarts "
                            + maxRestarts + ", all used): exiting with rank " + outcome.failedRank() + "'s code "
                            + outcome.exitCode() + " (of generation " + plan.generation() + ")",
                            maxRestarts == 0 ? "" : "generation " + plan.generation() + " failed: ");
                }
                long failedAt = System.nanoTime();
                int next = plan.generation() + 1;
                err.println("symmem4j-run: generation " + plan.generation() + " failed: " + outcome.message()
                        + "; restarting as generation " + next + " (restart " + next + " of " + maxRestarts + ", "
                        + (left - 1) + " left after it)" + (restartDelaySeconds > 0 ? " in " + restartDelaySeconds + " s" : ""));
                if (!generations.pause(Duration.ofNanos((long) (restartDelaySeconds * 1e9)))) {
                    return 130;
                }
                String nextRunId = LaunchPlan.generationRunId(firstRunId, next);
                previousSecret = ownSecret;
                ownSecret = generateSecret ? writeSecret(secretDir, "secret-g" + next)
                        : writeDerivedSecret(secretDir, "secret-g" + next, givenSecret, nextRunId);
                int slot = outcome.failedRank() - plan.ranks().getFirst().rank(); // its local rank
                int processes = plan.ranks().size();
                if (slot == previousFailedSlot && processes > minProcesses) {
                    // the process started into the slot after its failure failed too: the slot is not refilled
                    processes--;
                    err.println("symmem4j-run: local rank " + slot + "'s slot failed in generations " + (plan.generation() - 1)
                            + " and " + plan.generation() + ": not refilled; generation " + next + " runs " + processes
                            + " process(es) (--nproc-per-node " + spec.nprocPerNode() + "; the trainers resume on "
                            + processes + " workers from the newest checkpoint, re-sharded)");
                    previousFailedSlot = -1;
                } else {
                    previousFailedSlot = slot;
                }
                if (rdzv != null) {
                    try {
                        NodeRendezvous.Assignment a = rdzv.join(next, Duration.ofNanos((long) (lastCallSeconds * 1e9)));
                        spec = spec.withNodes(a.nnodes(), a.nodeRank());
                        err.println("symmem4j-run: generation " + next + ": node " + a.nodeRank() + " of " + a.nnodes()
                                + "; " + a.note());
                    } catch (IllegalStateException e) {
                        return finish(hook, outcome, "; generation " + next + " cannot start: " + e.getMessage(),
                                "generation " + plan.generation() + " failed: ");
                    }
                }
                int port;
                try {
                    port = restartPort(spec, next);
                } catch (IllegalStateException portTaken) {
                    return finish(hook, outcome, "; generation " + next + " cannot start: " + portTaken.getMessage(),
                            "generation " + plan.generation() + " failed: ");
                }
                if (port != spec.masterPort() + next) {
                    err.println("symmem4j-run: generation " + next + ": port " + (spec.masterPort() + next)
                            + " (--master-port " + spec.masterPort() + " + " + next + ") is in use on " + spec.masterAddr()
                            + "; taking port " + port + ", which the system chose free");
                }
                plan = LaunchPlan.of(spec, machine, env, javaBin, ownSecret, freshRunId, next, processes, port);
                err.println("symmem4j-run: generation " + next + ": run id " + plan.runId() + ", port " + plan.masterPort()
                        + ", a new secret; starting " + plan.ranks().size() + " process(es) "
                        + String.format(Locale.ROOT, "%.2f s", (System.nanoTime() - failedAt) / 1e9) + " after the failure"
                        + " was handled");
            }
        } finally {
            if (rdzvHost != null) {
                rdzvHost.close(); // END to every launcher: no more rounds
            }
            if (rdzv != null) {
                rdzv.close();
            }
            deleteQuietly(secretDir);
        }
    }

    /**
     * What {@code --nnodes MIN:MAX} refuses among the launcher's own options: node ranks (the rendezvous assigns them;
     * torchrun ignores {@code --node-rank} then, here it is refused so that no one believes it placed a machine),
     * {@code --on-failure shrink} (the dead ranks are announced in a file of one machine), bad rendezvous times.
     */
    private void checkElasticOptions() {
        if (commandSpec.commandLine().getParseResult().hasMatchedOption("--node-rank")) {
            throw new IllegalArgumentException("--node-rank " + nodeRank + " with --nnodes " + nnodesValue + ": the"
                    + " rendezvous assigns node ranks each generation (node 0 is the launcher that hosts it, on"
                    + " --master-addr); expected no --node-rank (fix: drop it)");
        }
        if (!"stop".equalsIgnoreCase(onFailure.strip())) {
            throw new IllegalArgumentException("--on-failure " + onFailure + " with --nnodes " + nnodesValue + ": the dead"
                    + " ranks are announced in a file on one machine, which the other machines' processes cannot read;"
                    + " expected --on-failure stop (fix: drop --on-failure; the job restarts on the machines it still"
                    + " has)");
        }
        if (!(lastCallSeconds >= 0 && lastCallSeconds <= 3600) || !(rdzvTimeoutSeconds > 0 && rdzvTimeoutSeconds <= 86400)) {
            throw new IllegalArgumentException("--rdzv-last-call=" + lastCallSeconds + " --rdzv-timeout="
                    + rdzvTimeoutSeconds + ": expected a last call in [0, 3600] s and a timeout in (0, 86400] s (fix:"
                    + " e.g. --rdzv-last-call 10 --rdzv-timeout 600)");
        }
    }

    /**
     * Generation {@code g}'s store port, checked free where it can be: {@code --master-port + g} when it can be bound
     * on {@code --master-addr} now (as rank 0's store binds it, with {@code SO_REUSEADDR}, so a socket of the old
     * generation in {@code TIME_WAIT} does not count), or, when another program holds it, on a job of this machine
     * alone a port the system chooses (bound to port 0, read, released: rank 0 binds it a moment later, as
     * {@code --standalone} does for generation 0) and, on node 0 of a job of several machines, whose other launchers
     * compute {@code --master-port + g} on their own, an error that names the port and the fix. Other machines' launchers
     * and a {@code --master-addr} that is no address of this machine get {@code --master-port + g} unchecked (rank 0's
     * store is elsewhere; it says so if it cannot bind).
     *
     * @param spec       the job
     * @param generation the generation about to start, at least 1
     * @return the port to hand the generation's processes
     * @throws IllegalStateException on node 0 of a job of several machines, when {@code --master-port + g} is in use
     */
    static int restartPort(LaunchSpec spec, int generation) {
        int ruled = spec.masterPort() + generation;
        if (spec.nodeRank() != 0) {
            return ruled;
        }
        InetAddress addr;
        try {
            addr = InetAddress.getByName(spec.masterAddr());
            if (!addr.isLoopbackAddress() && !addr.isAnyLocalAddress()
                    && NetworkInterface.getByInetAddress(addr) == null) {
                return ruled; // not this machine's: rank 0's store is not here
            }
        } catch (IOException e) {
            return ruled; // a name this machine cannot resolve: rank 0's store says what it finds
        }
        String taken;
        try (ServerSocket probe = new ServerSocket()) {
            probe.setReuseAddress(true);
            probe.bind(new InetSocketAddress(addr, ruled), 1);
            return ruled;
        } catch (IOException e) {
            taken = e.getMessage();
        }
        if (spec.nnodes() > 1) {
            throw new IllegalStateException("its store port " + ruled + " (--master-port " + spec.masterPort() + " + "
                    + "generation " + generation + ") is in use on " + spec.masterAddr() + " (" + taken + "), and the"
                    + " launchers of the other " + (spec.nnodes() - 1) + " machine(s) expect the store there; expected"
                    + " the ports " + spec.masterPort() + ".." + (spec.masterPort() + spec.maxRestarts()) + " free on node 0"
                    + " (fix: a --master-port whose next " + spec.maxRestarts() + " ports no other program uses, on every"
                    + " machine)");
        }
        try (ServerSocket probe = new ServerSocket()) {
            probe.setReuseAddress(true);
            probe.bind(new InetSocketAddress(addr, 0), 1);
            return probe.getLocalPort();
        } catch (IOException e) {
            throw new IllegalStateException("its store port " + ruled + " is in use on " + spec.masterAddr() + " (" + taken
                    + "), and no port the system chooses could be bound there either (" + e.getMessage() + "; fix: find"
                    + " what holds port " + ruled + ", e.g. with ss -ltnp, and stop it, or pass a --master-port whose"
                    + " next " + spec.maxRestarts() + " ports are free)", e);
        }
    }

    /**
     * The launcher's last word: the outcome (with {@code --max-restarts}, after the generation it ended in, as
     * {@code generation 2 failed: rank 1 ... was killed by signal 9}), what restarts had to do with it, and its exit
     * status.
     */
    private int finish(Thread hook, Supervisor.Outcome outcome, String restarts, String generation) {
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException shuttingDown) {
            return outcome.exitCode(); // the hook stops the processes and says so
        }
        err.println("symmem4j-run: " + generation + outcome.message() + restarts);
        return outcome.exitCode();
    }

    /**
     * The generation running now, and whether the launcher was interrupted (its shutdown hook): once it was, no
     * generation starts, and the pause between generations ends at once.
     */
    private static final class Generations {
        private Supervisor current;
        private boolean interrupted;

        synchronized boolean begin(Supervisor next) {
            current = next;
            return !interrupted;
        }

        synchronized boolean interrupted() {
            return interrupted;
        }

        /** Stops the current generation (bounded by its grace period); no other starts after it. */
        List<String> interrupt() {
            Supervisor s;
            synchronized (this) {
                interrupted = true;
                notifyAll();
                s = current;
            }
            return s == null ? List.of() : s.stop();
        }

        /** Waits {@code delay}, or less when interrupted; returns whether the next generation may start. */
        synchronized boolean pause(Duration delay) {
            long deadline = System.nanoTime() + delay.toNanos();
            long left;
            while (!interrupted && (left = deadline - System.nanoTime()) > 0) {
                try {
                    TimeUnit.NANOSECONDS.timedWait(this, left);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return false;
                }
            }
            return !interrupted;
        }
    }

    /**
     * The secret given for the job ({@code SYMMEM4J_SECRET} wins, as in the runtime; else the file of
     * {@code --secret-file} or {@code SYMMEM4J_SECRET_FILE}), without a trailing newline.
     */
    private byte[] baseSecret(LaunchSpec spec) {
        String direct = env.get(LaunchPlan.SECRET_ENV);
        if (direct != null && !direct.isBlank()) {
            return direct.getBytes(StandardCharsets.UTF_8);
        }
        Path f = spec.secretFile() != null ? spec.secretFile() : Path.of(env.get(LaunchPlan.SECRET_FILE_ENV).strip());
        byte[] content;
        try {
            content = Files.readAllBytes(f);
        } catch (IOException e) {
            throw new IllegalArgumentException("--max-restarts derives each generation's secret from the job's, but its"
                    + " file " + f + " cannot be read: " + e + " (fix: make the file readable by this user, or unset"
                    + " " + LaunchPlan.SECRET_FILE_ENV + " to let the launcher generate a secret)");
        }
        int end = content.length;
        while (end > 0 && (content[end - 1] == '\n' || content[end - 1] == '\r')) {
            end--;
        }
        return Arrays.copyOf(content, end);
    }

    private static String cpuSummary(LaunchPlan plan) {
        StringBuilder b = new StringBuilder();
        for (LaunchPlan.RankLaunch r : plan.ranks()) {
            b.append(b.isEmpty() ? "" : " ").append(r.localRank()).append(':').append(CpuList.format(r.cpus()));
        }
        return b.toString();
    }

    /**
     * {@code --standalone}: this machine alone, the store on loopback at a free port, a fresh run id (unless
     * {@code --run-id} names one). Options that place the job elsewhere contradict it and are refused.
     */
    private void standalone() throws IOException {
        List<String> contradicting = new ArrayList<>();
        if (nnodes != 1) {
            contradicting.add("--nnodes=" + nnodes);    // --nnodes=1, torchrun's usual companion, is fine
        }
        for (String option : List.of("--node-rank", "--master-addr", "--master-port")) {
            if (commandSpec.commandLine().getParseResult().hasMatchedOption(option)) {
                contradicting.add(option);
            }
        }
        if (!contradicting.isEmpty()) {
            throw new IllegalArgumentException("--standalone runs a job of this machine alone, on a store at a free"
                    + " loopback port, but " + String.join(", ", contradicting) + " was given (fix: drop "
                    + (contradicting.size() == 1 ? "it" : "them") + ", or drop --standalone to place the store"
                    + " yourself (--master-addr, --master-port) for a job of several machines)");
        }
        masterAddr = "127.0.0.1";
        try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            masterPort = probe.getLocalPort();
        }
        if (runId == null) {
            runId = freshRunId();
        }
    }

    private static String freshRunId() {
        return "run-" + Long.toString(System.currentTimeMillis(), 36) + "-"
                + HexFormat.of().formatHex(new SecureRandom().generateSeed(4));
    }

    /** A fresh directory only this user can enter, for the job's secret. */
    private static Path privateDirectory() throws IOException {
        return Files.createTempDirectory("symmem4j-run-", PosixFilePermissions.asFileAttribute(
                PosixFilePermissions.fromString("rwx------")));
    }

    /** 32 random bytes, hex, in a file of mode 0600: what {@code SYMMEM4J_SECRET_FILE} points the processes to. */
    private static Path writeSecret(Path dir, String name) throws IOException {
        byte[] secret = new byte[32];
        new SecureRandom().nextBytes(secret);
        return writePrivate(dir.resolve(name), HexFormat.of().formatHex(secret));
    }

    /**
     * A restarted generation's secret when the job's secret is given (shared by the job's machines):
     * HMAC-SHA256 of {@code what} (generation 0's run id and the generation) keyed with the given secret, hex,
     * in a file of mode 0600. Every machine's launcher derives the same one; a process of an older generation
     * holds only its own generation's secret, so it cannot join the new store.
     */
    static Path writeDerivedSecret(Path dir, String name, byte[] secret, String what) throws IOException {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            return writePrivate(dir.resolve(name), HexFormat.of().formatHex(
                    mac.doFinal(("symmem4j-run restart " + what).getBytes(StandardCharsets.UTF_8))));
        } catch (GeneralSecurityException e) {
            // error-message: every JDK has HmacSHA256 (Java SE requires it); no user input reaches here
            throw new IllegalStateException("HmacSHA256 is part of every JDK", e);
        }
    }

    private static Path writePrivate(Path f, String content) throws IOException {
        Files.createFile(f, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
        Files.writeString(f, content, StandardCharsets.US_ASCII);
        return f;
    }

    private static void deleteQuietly(Path dir) {
        if (dir == null) {
            return;
        }
        try (var files = Files.list(dir)) {
            for (Path f : files.toList()) {
                Files.deleteIfExists(f);
            }
            Files.deleteIfExists(dir);
        } catch (IOException | UncheckedIOException e) {
            // gone already, or the hook and the main thread raced: nothing left to protect
        }
    }

    /** {@code auto} or {@code none}, any case. */
    static final class CpuBindConverter implements CommandLine.ITypeConverter<LaunchSpec.CpuBind> {
        @Override
        public LaunchSpec.CpuBind convert(String value) {
            try {
                return LaunchSpec.CpuBind.valueOf(value.trim().toUpperCase(Locale.ROOT));
            } catch (IllegalArgumentException e) {
                throw new CommandLine.TypeConversionException("'" + value + "': expected auto or none");
            }
        }
    }

    /** The version in the jar's manifest ({@code Implementation-Version}). */
    static final class Version implements CommandLine.IVersionProvider {
        @Override
        public String[] getVersion() {
            String v = Launcher.class.getPackage().getImplementationVersion();
            return new String[] {"symmem4j-run " + (v == null ? "(version unknown: not run from its jar)" : v)};
        }
    }
}
