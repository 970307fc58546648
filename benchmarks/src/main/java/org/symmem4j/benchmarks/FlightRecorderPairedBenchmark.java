package org.symmem4j.benchmarks;

import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OperationsPerInvocation;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.IterationParams;
import org.openjdk.jmh.runner.IterationType;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.control.FlightRecording;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The flight recorder's cost in a host all-reduce (issue #36: at most 1 % of a 1 KiB one), on ONE communicator per
 * rank whose recorder is switched off and on between short iterations ({@link FlightRecording}, through
 * {@code unwrap}), so that everything but the recorder stays put: the scratch memory's placement, the ranks' threads
 * and CPUs, the JIT's code. Iterations (blocks of all-reduces, 40 ms by default) alternate off, on, on, off, off, on
 * ... ({@link #recorderOn}: pairs in ABBA order, so a linear drift within the fork cancels too); every rank switches
 * its own recorder at the block's first all-reduce. {@code FlightRecorderCostBench} pairs iteration 2j with 2j+1 and
 * reports the mean paired difference with a t and a bootstrap interval.
 *
 * <p>The earlier design (two communicators per rank, one made with the recorder and one without) measured which of
 * the two a fork had placed better: −3.8 % to +8.7 % across cells, intervals excluding zero in both directions,
 * against 9.6 ns of recorder work per collective ({@code 2026-11-28-recorder-and-ring-16core.md}).
 *
 * <p>The switch is the control plane's reference to its recorder, which the hot path reads anyway (null: off), so
 * switching adds no work to a collective. The JIT sees both states during the alternating warm-up, so both runs
 * execute the recorder's null checks as real branches (a JVM whose recorder is always off would compile them away):
 * four untaken branches per collective, so the difference is, if anything, smaller than the true one by well under
 * a nanosecond.
 *
 * <p>On a machine with at least {@code ranks} idle cores (each rank spins on its own; fewer cores measure the
 * scheduler). The JMH thread is rank 0; the other ranks are threads driven by {@link PeerDriver}. With
 * {@code -Dsymmem4j.bench.cpus=A,B,C,D} naming at least {@code ranks} CPUs ({@link BenchCpus}) rank r is pinned to
 * the r-th; with fewer, no rank is pinned.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 100, time = 40, timeUnit = TimeUnit.MILLISECONDS)
@Measurement(iterations = 400, time = 40, timeUnit = TimeUnit.MILLISECONDS)
@Fork(value = 2, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Xmx1g",
        "-D" + FlightRecorderPairedBenchmark.ENTRIES_PROPERTY + "=" + FlightRecorderPairedBenchmark.ENTRIES_ON,
        "-D" + FlightRecorderPairedBenchmark.PREWARM_PROPERTY + "=" + FlightRecorderPairedBenchmark.PREWARM_DEFAULT})
// FlightRecorderCostBench replaces these flags with forkFlags(entries, arrival): keep the two lists the same
@State(Scope.Thread)
public class FlightRecorderPairedBenchmark {

    /** The recorder's size (the default), set on the forks' command line. */
    public static final int ENTRIES_ON = 1024;

    /** {@link Configuration#FLIGHT_RECORDER_ENTRIES}'s property, as a constant for the annotation. */
    static final String ENTRIES_PROPERTY = "symmem4j.flight.recorder.entries";

    /** {@link Configuration#FLIGHT_RECORDER_ARRIVAL}'s property. */
    static final String ARRIVAL_PROPERTY = "symmem4j.flight.recorder.arrival";
    /**
     * Where the recorder writes a collective's entry by default, the product's default
     * ({@link Configuration#FLIGHT_RECORDER_ARRIVAL}): in the entry barrier's shadow.
     */
    static final String ARRIVAL_DEFAULT = "in-shadow";
    /**
     * The property naming a file each fork appends one line to after its set-up: every rank's {@link
     * FlightRecording#placement} (the recorder's storage, the signal pads and the data regions, with their page and
     * line offsets), so that {@code FlightRecorderCostBench} can print each fork's placement next to its mean.
     */
    static final String PLACEMENT_FILE_PROPERTY = "symmem4j.bench.recorder.placement.file";
    /** {@link Configuration#FLIGHT_RECORDER_PROBE}'s property. */
    static final String PROBE_PROPERTY = "symmem4j.flight.recorder.probe";
    /** {@link Configuration#WAIT_SPIN_FIRST}'s property. */
    static final String SPIN_FIRST_PROPERTY = "symmem4j.wait.spinfirst";
    /** A cell's suffix that sets {@code -Dsymmem4j.flight.recorder.probe=arrival}: only the entry's write is made. */
    static final String ARRIVAL_ONLY_SUFFIX = "+arrival";
    /** A cell's suffix that sets {@code -Dsymmem4j.flight.recorder.probe=none}: the A/A control (on − off must be 0). */
    static final String NONE_SUFFIX = "+none";
    /** A cell's suffix before a count, {@code +spin64}: {@code -Dsymmem4j.wait.spinfirst=64} in its forks. */
    static final String SPIN_PREFIX = "+spin";
    /**
     * The property that sets how many all-reduces each fork runs with its recorder switched every {@link
     * #PREWARM_PERIOD} collectives before JMH's first block ({@link #prewarm}); 0: none (the benchmark before
     * 2026-11-29 22:00 UTC).
     */
    static final String PREWARM_PROPERTY = "symmem4j.bench.recorder.prewarm";
    /** All-reduces of the pre-warm by default: about 0.3 s at 1.1 µs each, some 17 times C2's compile threshold. */
    static final int PREWARM_DEFAULT = 1 << 18;
    /** The pre-warm switches the recorder every this many collectives on every rank (a power of two). */
    static final int PREWARM_PERIOD = 64;
    /** A cell's suffix that leaves the pre-warm out ({@code -Dsymmem4j.bench.recorder.prewarm=0}): the old benchmark. */
    static final String COLD_SUFFIX = "+cold";
    /**
     * The property that has the pre-warm switch the recorder on for one period of every N ({@value #PREWARM_PERIOD}
     * collectives each) instead of every other one: the recorder on in 1/N of the profiled calls. 2 by default.
     */
    static final String PREWARM_EVERY_PROPERTY = "symmem4j.bench.recorder.prewarm.every";
    /**
     * A cell's suffix before N, {@code +share20}: the pre-warm has the recorder on in 1/N of the collectives
     * ({@link #PREWARM_EVERY_PROPERTY}), so C2 compiles the collective from an off-heavy profile on purpose: what a
     * fork of the old benchmark whose profile came out off-heavy paid, measured in every fork.
     */
    static final String SHARE_PREFIX = "+share";
    /**
     * The JIT-log flags {@code FlightRecorderCostBench --jit-log} adds: each fork writes HotSpot's compilation log
     * (every compilation's inlining decisions with the call-site counts they were made from, deoptimisations,
     * uncommon traps) into jit-pidPID.log in its working directory, for {@code bench/shared-state/jit-forks.py}.
     */
    static final List<String> JIT_LOG_FLAGS = List.of("-XX:+UnlockDiagnosticVMOptions", "-XX:+LogCompilation",
            "-XX:LogFile=jit-%p.log");
    /** A cell's suffix before a ring size of its own ({@code in-shadow@256}) instead of {@code --entries}. */
    static final String ENTRIES_SEPARATOR = "@";
    /**
     * The placements {@link #ARRIVAL_PROPERTY} accepts; a cell of {@code --arrivals} is one of them, followed by any of
     * {@link #ARRIVAL_ONLY_SUFFIX}, {@link #NONE_SUFFIX}, {@code +spinN}, {@link #COLD_SUFFIX} or {@code +shareN} (each
     * at most once), and by {@code @E}, a ring of E entries.
     */
    static final java.util.List<String> ARRIVALS = java.util.List.of("after-wait", "in-shadow");

    /**
     * One cell of {@code --arrivals}, parsed: {@code WHERE[+arrival|+none][+spinN][+cold|+shareN][@ENTRIES]}.
     *
     * @param where     {@code after-wait} or {@code in-shadow}
     * @param probe     {@link Configuration#FLIGHT_RECORDER_PROBE}: {@code all}, {@code arrival} or {@code none}
     * @param spinFirst {@link Configuration#WAIT_SPIN_FIRST}
     * @param entries   the recorder's entries while on
     * @param prewarm   all-reduces of the pre-warm ({@link #prewarm}): {@link #PREWARM_DEFAULT}, 0 with {@code +cold}
     * @param every     the pre-warm has the recorder on in one period of every this many: 2, or N with {@code +shareN}
     */
    record Cell(String where, String probe, int spinFirst, int entries, int prewarm, int every) {

        /**
         * Parses a cell.
         *
         * @param spec           the cell, e.g. {@code in-shadow@256} or {@code in-shadow+arrival+spin64}
         * @param defaultEntries the entries of a cell without {@code @E} ({@code --entries})
         * @return the cell
         */
        static Cell parse(String spec, int defaultEntries) {
            String rest = spec;
            int entries = defaultEntries;
            int at = rest.indexOf(ENTRIES_SEPARATOR);
            if (at >= 0) {
                entries = number(rest.substring(at + 1));
                rest = rest.substring(0, at);
            }
            String[] parts = rest.split("\\+", -1);
            String where = parts[0];
            String probe = "all";
            int spinFirst = 0;
            int prewarm = PREWARM_DEFAULT;
            int every = 2;
            String bad = null;
            java.util.Set<String> seen = new java.util.HashSet<>();
            for (int k = 1; k < parts.length && bad == null; k++) {
                String flag = "+" + parts[k];
                String kind = flag.startsWith(SPIN_PREFIX) ? SPIN_PREFIX
                        : flag.equals(COLD_SUFFIX) || flag.startsWith(SHARE_PREFIX) ? COLD_SUFFIX : flag;
                if (!seen.add(kind)) {
                    bad = flag + " twice";
                } else if (flag.equals(COLD_SUFFIX)) {
                    prewarm = 0;
                } else if (flag.equals(ARRIVAL_ONLY_SUFFIX) || flag.equals(NONE_SUFFIX)) {
                    if (!"all".equals(probe)) {
                        bad = "both +arrival and +none";
                    }
                    probe = flag.substring(1);
                } else if (flag.startsWith(SHARE_PREFIX) && number(flag.substring(SHARE_PREFIX.length())) >= 2) {
                    every = number(flag.substring(SHARE_PREFIX.length()));
                } else if (flag.startsWith(SPIN_PREFIX) && number(flag.substring(SPIN_PREFIX.length())) >= 0) {
                    spinFirst = number(flag.substring(SPIN_PREFIX.length()));
                } else {
                    bad = "an unknown part " + flag;
                }
            }
            if (!ARRIVALS.contains(where) || entries < 1 || spinFirst > 4096 || bad != null) {
                throw new IllegalArgumentException("--arrivals cell " + spec + ": expected WHERE"
                        + "[+arrival|+none][+spinN][+cold|+shareM][@ENTRIES] with WHERE one of " + ARRIVALS
                        + ", 0 <= N <= 4096, M >= 2 and"
                        + " ENTRIES >= 1, found where=" + where + " entries=" + (at >= 0 ? spec.substring(at + 1) : entries)
                        + (bad == null ? "" : ", " + bad)
                        + " (fix: e.g. --arrivals in-shadow,after-wait,in-shadow@256,in-shadow+arrival,in-shadow+none,"
                        + "in-shadow+spin64,in-shadow+cold,in-shadow+share20)");
            }
            return new Cell(where, probe, spinFirst, entries, prewarm, every);
        }

        /** {@return {@code text} as a whole number, or -1 when it is not one} */
        private static int number(String text) {
            try {
                return Integer.parseInt(text);
            } catch (NumberFormatException e) {
                return -1;
            }
        }
    }

    /**
     * The forks' JVM flags (the annotation's) with a recorder of {@code entries} entries that writes its entries
     * where {@code arrival} says: JMH's options replace the annotation's list as a whole.
     *
     * @param entries the recorder's size while on
     * @param arrival a cell ({@link Cell#parse}): {@code after-wait} or {@code in-shadow} ({@link
     *                Configuration#FLIGHT_RECORDER_ARRIVAL}), with {@code +arrival} or {@code +none} for {@link
     *                Configuration#FLIGHT_RECORDER_PROBE}, {@code +spinN} for {@link Configuration#WAIT_SPIN_FIRST},
     *                {@link #COLD_SUFFIX} for no pre-warm, {@code +shareN} for a pre-warm with the recorder on in
     *                1/N of the collectives, and {@code @E} for a ring of E entries
     * @return the flags
     */
    static String[] forkFlags(int entries, String arrival) {
        return forkFlags(entries, arrival, false);
    }

    /**
     * {@link #forkFlags(int, String)}, with {@link #JIT_LOG_FLAGS} when {@code jitLog}.
     *
     * @param entries the recorder's size while on
     * @param arrival a cell ({@link Cell#parse})
     * @param jitLog  whether each fork writes its compilations and inlining decisions into jit-PID.log
     * @return the flags
     */
    static String[] forkFlags(int entries, String arrival, boolean jitLog) {
        Cell c = Cell.parse(arrival, entries);
        List<String> flags = new java.util.ArrayList<>(List.of("--enable-native-access=ALL-UNNAMED",
                "--add-modules=jdk.incubator.vector", "-Xmx1g",
                "-D" + ENTRIES_PROPERTY + "=" + c.entries(), "-D" + ARRIVAL_PROPERTY + "=" + c.where(),
                "-D" + PROBE_PROPERTY + "=" + c.probe(), "-D" + SPIN_FIRST_PROPERTY + "=" + c.spinFirst(),
                "-D" + PREWARM_PROPERTY + "=" + c.prewarm(), "-D" + PREWARM_EVERY_PROPERTY + "=" + c.every()));
        if (jitLog) {
            flags.addAll(JIT_LOG_FLAGS);
        }
        return flags.toArray(String[]::new);
    }

    @Param({"1024"})
    public long bytes;

    @Param({"ONE_SHOT", "TWO_SHOT"})
    public Algorithm algorithm;

    @Param({"2", "4"})
    public int ranks;

    private InJvmWorld world;
    private Group group;
    private Communicator comm;
    private FlightRecording recording;
    private SymmetricMemory mem;
    private long count;
    /**
     * Whether the peers record ({@link #PEERS_OFF}, {@link #PEERS_ON}) or switch every {@link #PREWARM_PERIOD}
     * collectives ({@link #PEERS_ALTERNATE}, the pre-warm): written by rank 0 before it requests the operations.
     */
    private volatile int peersMode;
    private static final int PEERS_OFF = 0;
    private static final int PEERS_ON = 1;
    private static final int PEERS_ALTERNATE = 2;
    private final AtomicLong requested = new AtomicLong();
    private volatile boolean stop;
    private Thread[] peers;
    private int warmups;
    private int measured;

    /**
     * Whether iteration {@code k} (of the warm-up or of the measurement, counted from 0) runs with the recorder: off, on,
     * on, off, off, on, on, off ... Iterations {@code 2j} and {@code 2j + 1} form pair {@code j}, one of each.
     *
     * @param k the iteration
     * @return true for the recorder on
     */
    public static boolean recorderOn(int k) {
        boolean firstOfPair = k % 2 == 0;
        boolean pairStartsOff = (k / 2) % 2 == 0;
        return firstOfPair != pairStartsOff;
    }

    @Setup(Level.Trial)
    public void setUp() throws InterruptedException {
        if (!ARRIVAL_PROPERTY.equals(Configuration.FLIGHT_RECORDER_ARRIVAL.property())) {
            throw new IllegalStateException("the recorder's placement property is "
                    + Configuration.FLIGHT_RECORDER_ARRIVAL.property() + ", expected " + ARRIVAL_PROPERTY
                    + " (fix: update ARRIVAL_PROPERTY)");
        }
        if (!PROBE_PROPERTY.equals(Configuration.FLIGHT_RECORDER_PROBE.property())
                || !SPIN_FIRST_PROPERTY.equals(Configuration.WAIT_SPIN_FIRST.property())) {
            throw new IllegalStateException("the recorder's probe and the wait's spin-first properties are "
                    + Configuration.FLIGHT_RECORDER_PROBE.property() + " and " + Configuration.WAIT_SPIN_FIRST.property()
                    + ", expected " + PROBE_PROPERTY + " and " + SPIN_FIRST_PROPERTY + " (fix: update those constants)");
        }
        if (!ENTRIES_PROPERTY.equals(Configuration.FLIGHT_RECORDER_ENTRIES.property())) {
            throw new IllegalStateException("the recorder's property is " + Configuration.FLIGHT_RECORDER_ENTRIES.property()
                    + ", expected " + ENTRIES_PROPERTY + " (fix: update ENTRIES_PROPERTY)");
        }
        count = bytes / 4;
        int[] cpus = BenchCpus.cpus();
        boolean pin = cpus.length >= ranks;
        if (pin) {
            BenchCpus.pinCurrentThread(0, "rank 0 (the JMH thread)");
        }
        world = InJvmWorld.create(ranks);
        peers = new Thread[ranks - 1];
        CountDownLatch ready = new CountDownLatch(ranks - 1);
        String[] placements = new String[ranks]; // each peer writes its own before ready.countDown(); read after await()
        AtomicReference<Throwable> peerFailure = new AtomicReference<>();
        for (int r = 1; r < ranks; r++) {
            int rank = r;
            peers[r - 1] = Thread.ofPlatform().name("bench-rank-" + r).start(() -> {
                try {
                    if (pin) {
                        BenchCpus.pinCurrentThread(rank, "rank " + rank);
                    }
                    try (Group g = world.join(rank); Communicator c = Communicator.create(g);
                         SymmetricMemory m = SymmetricMemory.allocate(g, bytes)) {
                        FlightRecording sw = switchOf(c);
                        HostAllReduceBenchmark.fill(m);
                        placements[rank] = sw.placement() + "; all-reduce buffer " + m.local().address() % 4096
                                + " mod 4096";
                        ready.countDown();
                        long[] done = {0};
                        PeerDriver.serve(PeerDriver.inJvm(requested, () -> stop), () -> {
                            int mode = peersMode;
                            boolean on = mode == PEERS_ALTERNATE ? alternateOn(done[0]++) : mode == PEERS_ON;
                            if (on != sw.isRecording()) {
                                sw.setRecording(on); // the block's first all-reduce on this rank
                            }
                            c.allReduce(m, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                        });
                    }
                } catch (Throwable t) {
                    peerFailure.set(t);
                    ready.countDown();
                }
            });
        }
        group = world.join(0);
        comm = Communicator.create(group);
        recording = switchOf(comm);
        mem = SymmetricMemory.allocate(group, bytes);
        HostAllReduceBenchmark.fill(mem);
        placements[0] = recording.placement() + "; all-reduce buffer " + mem.local().address() % 4096 + " mod 4096";
        ready.await();
        if (peerFailure.get() != null) {
            throw new IllegalStateException("a peer rank failed to set up: expected every rank's communicator and"
                    + " memory, found " + peerFailure.get() + " (fix: see the cause below)", peerFailure.get());
        }
        int prewarmOps = Integer.getInteger(PREWARM_PROPERTY, 0);
        if (prewarmOps < 0) {
            throw new IllegalArgumentException(PREWARM_PROPERTY + "=" + prewarmOps + ": expected all-reduces >= 0"
                    + " (fix: e.g. " + PREWARM_DEFAULT + ", or 0 for none)");
        }
        int every = Integer.getInteger(PREWARM_EVERY_PROPERTY, 2);
        if (every < 2) {
            throw new IllegalArgumentException(PREWARM_EVERY_PROPERTY + "=" + every + ": expected a period count >= 2"
                    + " (fix: 2 for the recorder on in half of the pre-warm, N for 1/N)");
        }
        prewarmEvery = every; // plain: the peers read it after the volatile write of peersMode in prewarm()
        printPlacement(placements);
        prewarm(prewarmOps);
        System.out.println("flight recorder paired benchmark: one communicator per rank, recorder of "
                + Configuration.FLIGHT_RECORDER_ENTRIES.get() + " entries switched per iteration, entry written "
                + Configuration.FLIGHT_RECORDER_ARRIVAL.get() + ", probe " + Configuration.FLIGHT_RECORDER_PROBE.get() + ", wait spin-first "
                + Configuration.WAIT_SPIN_FIRST.get() + ", pre-warm " + prewarmOps + " all-reduces, the recorder on in"
                + " 1 of every " + every + " periods of " + PREWARM_PERIOD + "; pid " + ProcessHandle.current().pid() + "; ranks " + (pin ? "pinned to CPUs "
                + java.util.Arrays.toString(java.util.Arrays.copyOf(cpus, ranks)) : "not pinned (-D" + BenchCpus.PROPERTY
                + " names " + cpus.length + " CPUs, " + ranks + " needed)"));
    }

    /**
     * Prints where this fork's memory fell (every rank's {@link FlightRecording#placement}), and appends it as one line
     * to {@link #PLACEMENT_FILE_PROPERTY}'s file when set: a fork whose recorder costs 40-60 ns instead of 5 can then
     * be held against its addresses' page and line offsets (issue #36).
     *
     * @param placements each rank's placement, by rank
     */
    private static void printPlacement(String[] placements) {
        String line = "placement: pid " + ProcessHandle.current().pid() + " | " + String.join(" | ", placements);
        System.out.println(line);
        String file = System.getProperty(PLACEMENT_FILE_PROPERTY);
        if (file != null && !file.isBlank()) {
            try {
                java.nio.file.Files.writeString(java.nio.file.Path.of(file), line + "\n",
                        java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.APPEND);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException("placement file " + file + " not writable: expected a writable"
                        + " path in -D" + PLACEMENT_FILE_PROPERTY + " (fix: point it into the run's directory)", e);
            }
        }
    }

    /** The pre-warm has the recorder on in one period of every this many ({@link #PREWARM_EVERY_PROPERTY}). */
    private int prewarmEvery = 2;

    /** {@return whether the pre-warm's collective {@code k} (counted per rank) runs with the recorder on} */
    private boolean alternateOn(long k) {
        return k / PREWARM_PERIOD % prewarmEvery == prewarmEvery - 1;
    }

    /**
     * Runs {@code ops} all-reduces on every rank with each rank's recorder switched every {@link #PREWARM_PERIOD}
     * collectives, before JMH's first block, so that the profile C2 compiles the collective from holds the recorder
     * on in half of them in every fork.
     *
     * <p>Why (bench/results/2026-11-29-recorder-bimodal-forks.md): without it the collective runs its first blocks at
     * milliseconds to tens of µs per call and C2's code arrives in warm-up block 9 or 10 (32 cores), after blocks 8
     * and 9, both off, ran most of the profiled calls (the recorder on in 7-26 % of them), and the recompilations
     * after the first "on" block see the recorder on in a share that depends on the fork's timing. The
     * recorder's calls from the hot path (FlightRecorder.arrived, 241 bytes of bytecode; completed, 63; started,
     * 39) are larger than C2's MaxInlineSize (35), so C2 inlines them only where the call site counts at least
     * InlineFrequencyRatio (0.25) of its caller's invocations; below that they stay calls ("too big"), and below
     * MinInlineFrequencyRatio (0.0085) no call is inlined. A recorder that is always on (production) has that
     * share at 1, one that is always off never reaches the call: neither sees the in-between state that only the
     * benchmark's switching produces. The pre-warm puts every fork at a share of 0.5, then JMH's alternating blocks
     * keep it there.
     *
     * @param ops all-reduces, 0 for none
     */
    private void prewarm(int ops) {
        if (ops == 0) {
            return;
        }
        // volatile write, before the release of the request count below: a peer that sees the count sees the mode
        peersMode = PEERS_ALTERNATE;
        // release: the peers read the new total with getAcquire (PeerDriver.inJvm) and run the same number of ops
        requested.setRelease(requested.get() + ops);
        for (int k = 0; k < ops; k++) {
            boolean on = alternateOn(k);
            if (on != recording.isRecording()) {
                recording.setRecording(on);
            }
            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
        }
        recording.setRecording(false);
        // the first block's choose() writes the mode before it requests more: no peer runs an op of that block with
        // the pre-warm's mode (every peer began its last pre-warm op, or rank 0's last one could not have passed)
    }

    private static FlightRecording switchOf(Communicator c) {
        return c.unwrap(FlightRecording.class).orElseThrow(() -> new IllegalStateException("communicator " + c
                + " has no flight recorder to switch: expected " + ENTRIES_PROPERTY + " > 0, found "
                + System.getProperty(ENTRIES_PROPERTY) + " (fix: run the benchmark through JMH's fork, which sets "
                + ENTRIES_PROPERTY + "=" + ENTRIES_ON + ", or set it yourself)"));
    }

    /**
     * Switches this iteration's recorder ({@link #recorderOn}), warm-up and measurement counted apart.
     *
     * @param params which kind of iteration comes
     */
    @Setup(Level.Iteration)
    public void choose(IterationParams params) {
        int k = params.getType() == IterationType.WARMUP ? warmups++ : measured++;
        boolean on = recorderOn(k);
        recording.setRecording(on); // rank 0's own, between its collectives
        // volatile write, before allReduce() publishes the iteration's request count (release): a peer that sees the
        // new count sees this choice; every peer has begun the previous iteration's last operation already (rank 0's
        // last one could not pass its entry barrier before), so none switches inside an old iteration
        peersMode = on ? PEERS_ON : PEERS_OFF;
    }

    @Benchmark
    @OperationsPerInvocation(Sizes.OPS_PER_INVOCATION)
    public void allReduce() {
        // release: the peers read the new total with getAcquire and run the same number of ops
        requested.setRelease(requested.get() + Sizes.OPS_PER_INVOCATION);
        for (int i = 0; i < Sizes.OPS_PER_INVOCATION; i++) {
            comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws InterruptedException {
        stop = true;
        // close is collective: the peers close memory, then their communicator, when they stop; same order
        mem.close();
        comm.close();
        for (Thread peer : peers) {
            peer.join();
        }
        group.close();
        world.close();
    }
}
