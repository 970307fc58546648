package org.symmem4j.benchmarks;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.IterationParams;
import org.openjdk.jmh.runner.IterationType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.layout.RingBufferLayout;

/**
 * Ring throughput between 2 JVM processes with the ring HELD AT ONE FILL LEVEL: symmem4j's
 * {@link org.symmem4j.state.SymmetricRingBuffer} ({@code offer}, and {@code tryClaim}/{@code commit}) against Agrona's
 * {@code OneToOneRingBuffer}/{@code ManyToOneRingBuffer} ({@code write}, and {@code tryClaim}/{@code commit}) over files
 * in {@code /dev/shm}, one-to-one and many-to-one, in the same run, every kind driven by the same code.
 *
 * <h2>Why</h2>
 * {@link RingBenchmark#throughput} lets the ring find its own fill level, and the level is bistable: a consumer that
 * keeps up sees an (almost) empty ring, polls empty lines the producer is writing and pays the empty-poll path, which
 * slows it down; one that falls behind sees a full ring, the producer backs off on it, and the consumer reads long
 * runs. Which regime a fork lands in depends on its first milliseconds, and the two regimes differ by up to 2.6×
 * (many-to-one at 64 B, 16 cores: {@code bench/results/2026-11-29-ring64-analysis.md}), so more forks only show both.
 *
 * <h2>Design: a credit window with a floor</h2>
 * Beside the rings, a small file in {@code /dev/shm} ({@link FillPacer}, mapped by both processes, each counter on a
 * line of its own) holds two counters: the messages the producer has sent and those the consumer has read. Both
 * counters count messages, not ring bytes, so the same code paces every ring, whatever its record format. With
 * {@code B} = {@link #BATCH} and {@code T} = the fill level in messages ({@link #fillPercent} % of what the ring holds
 * of {@link #messageBytes}-byte messages, rounded to a multiple of {@code B}):
 * <ul>
 *   <li><b>producer</b> (the JMH thread, rank 0): sends only while {@code sent - consumed < T + 2B} (a credit window,
 *       as Aeron's publication limit or a "max outstanding messages" bound), reading the consumer's counter only when
 *       its cached copy says the window is used up; it publishes {@code sent} once every {@code B} messages;</li>
 *   <li><b>consumer</b> (the peer, rank 1): reads exactly {@code B} messages, and only when the published
 *       {@code sent - consumed >= T + B}, so that the ring still holds at least {@code T} messages afterwards (a
 *       floor); it then publishes {@code consumed}, once per batch.</li>
 * </ul>
 * So the ring always holds {@code T..T+2B} messages: the producer never finds it full (no back-off path, checked:
 * a refused write fails the trial) and the consumer never finds it empty (no empty-poll path; the only polls that
 * return fewer than asked are Agrona's that stop at the ring's wrap and are repeated there, ours reading on past it in
 * the same call: the peer logs polls per batch, 1.0000 and ~1.004 at 64 B). Neither side touches a
 * line the other is writing: {@code T} messages lie between them. The regime cannot flip, between forks or within
 * one, because the level is set by the counters, not by who happens to be faster; whichever side is faster waits at
 * its watermark, on a counter line read once per batch at most (yielding every {@value #SPINS_PER_YIELD} spins, for
 * machines with fewer idle cores than spinning threads).
 *
 * <h2>Fairness</h2>
 * The same work per message for every kind: the producer copies the same {@code messageBytes} from one array into
 * the ring ({@code offer}/{@code write}, or {@code tryClaim}, a copy into the claimed room, {@code commit}); the
 * consumer's handler reads the first byte of each message. The same batching: each consumer step is one
 * {@code poll(handler, B)} on symmem4j's ring, one {@code read(handler, B)} on Agrona's ({@link RingPair#receive(int)}),
 * repeated only when a poll stopped at the wrap. The pacing costs (one counter store per {@code B} messages on each
 * side, one counter read when a cache says a watermark is reached) are the same for every kind. The "many-to-one"
 * kinds are the many-to-one rings (space claimed by CAS) with one producer process, as in {@link RingBenchmark}.
 *
 * <h2>Paired mode ({@link #against})</h2>
 * Forks of one kind and forks of another run minutes apart, and on a lent machine (a KVM guest whose virtual CPUs the
 * host places) a fork's throughput sits at one of two levels for seconds at a time, both rings' (64 B, 16 cores:
 * ~25 M and ~40 M msg/s, {@code bench/results/2026-11-29-ring-paired.md}), so the forks of each side spread
 * by up to 59 % and no error bar separates two kinds. With {@code against} naming a second kind, one fork holds both
 * rings, each with its own pacing file, both served by the same consumer thread, and the JMH iterations (short
 * blocks) alternate between them in ABBA order ({@link FlightRecorderPairedBenchmark#recorderOn}: block {@code k}
 * writes to {@link #kind} when it is true, to {@code against} otherwise), warm-up included: both sides of a pair run
 * on the same cores, in the same JVMs, a block apart, so the machine's level cancels in their ratio. Each ring keeps
 * its fill level while the other runs (nothing is read from a ring whose producer is paused). The producer's and
 * the consumer's call sites then see both ring classes (bimorphic: one class check per call, the same for both).
 * {@link RingPairedSuite} reports the paired differences with t and bootstrap intervals.
 *
 * <p>Both sides spin, so each needs a core of its own; {@code -Dsymmem4j.bench.cpus=A,B} pins the producer to A and
 * the consumer to B ({@link BenchCpus}). {@link RingFillSuite} runs the comparison and prints one table with each
 * kind's fork spread; {@code bench/shared-state/run.sh ring-fill} runs it on a lent machine.
 */
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 3, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector",
        "--sun-misc-unsafe-memory-access=allow", "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED", "-Xmx1g"})
@State(Scope.Thread)
public class RingFillBenchmark {

    /** Ring bytes, as {@link RingBenchmark}'s. */
    static final int CAPACITY = RingBenchmark.CAPACITY;
    /** Messages per consumer step (a power of two), and the producer's publication interval. */
    static final int BATCH = RingPair.RECEIVE_LIMIT;
    /** Spins of a waiting side between two reads of the clock. */
    private static final int SPINS_PER_CLOCK = 1 << 16;
    /**
     * Spins of a waiting side between two {@link Thread#yield()}s: on a machine with a core per side a yield finds
     * nothing else to run and returns at once (a wait at a watermark lasts a batch's time, ~64 messages); on a
     * machine with fewer idle cores than spinning threads it lets the other side run, which the band of 2 batches
     * would otherwise leave waiting for the scheduler's time slice, one band per slice.
     */
    private static final int SPINS_PER_YIELD = 1 << 10;
    /** How long a side waits for the other's counter before it gives the trial up, naming it. */
    private static final long STALL_NANOS = TimeUnit.SECONDS.toNanos(30);

    @Param({"64", "256", "1024"})
    public int messageBytes;

    /** The fill level held, in % of the messages of {@link #messageBytes} the ring holds. */
    @Param({"25", "75"})
    public int fillPercent;

    @Param({"SYMMEM_ONE_TO_ONE", "SYMMEM_ONE_TO_ONE_CLAIM", "AGRONA_ONE_TO_ONE", "AGRONA_ONE_TO_ONE_CLAIM",
            "SYMMEM_MANY_TO_ONE", "SYMMEM_MANY_TO_ONE_CLAIM", "AGRONA_MANY_TO_ONE", "AGRONA_MANY_TO_ONE_CLAIM"})
    public RingPair.Kind kind;

    /** The kind measured against {@link #kind} in the same forks, block by block (paired mode), or NONE. */
    @Param({NONE})
    public String against;

    /** {@link #against}'s value for an unpaired trial. */
    static final String NONE = "NONE";

    private PeerProcess peer;
    /** The rings written now (the lane of this block). */
    private RingPair rings;
    /** The pacing file of the lane of this block. */
    private FillPacer pacer;
    private Path files;
    /** Messages sent by this (producer) side into the lane of this block. */
    private long sent;
    /** The consumer's counter of the lane of this block, as last read. */
    private long consumedSeen;
    /** The credit window: {@code T + 2B} messages. */
    private long window;
    /** Every lane: {@link #kind}'s, then {@link #against}'s in paired mode. */
    private final List<Lane> lanes = new ArrayList<>();
    /** The lane of this block. */
    private Lane active;
    private int warmupBlocks;
    private int measuredBlocks;

    /**
     * One ring under test with its pacing file; both processes hold one per kind (two in paired mode), opened and closed
     * in the same order on both ranks (the symmem4j rings' creation and close are collective).
     */
    static final class Lane {
        final RingPair.Kind kind;
        /** Prefix of this lane's files (Agrona's rings, the pacing file). */
        final Path files;
        FillPacer pacer;
        RingPair rings;
        /** Producer side: the lane's counters, kept while another lane runs. */
        long sent;
        long consumedSeen;
        /** Consumer side: the level plus a batch, read from the pacing file once. */
        long floor;
        long consumed;
        long sentSeen;
        long polls;

        Lane(RingPair.Kind kind, Path files) {
            this.kind = kind;
            this.files = files;
        }
    }

    /**
     * The kinds a trial holds: {@code kind}, then {@code against} unless it is {@link #NONE}.
     *
     * @throws IllegalArgumentException for Aeron, an unknown name, or the same kind twice
     */
    static List<RingPair.Kind> kinds(RingPair.Kind kind, String against) {
        if (kind.aeron()) {
            throw new IllegalArgumentException("ring fill benchmark kind=" + kind + ": Aeron IPC has no ring to hold at a"
                    + " fill level (fix: name symmem4j's and Agrona's kinds)");
        }
        if (NONE.equals(against)) {
            return List.of(kind);
        }
        RingPair.Kind other;
        try {
            other = RingPair.Kind.valueOf(against);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("ring fill benchmark against=" + against + ": expected " + NONE
                    + " or a RingPair.Kind name (fix: e.g. -p against=AGRONA_MANY_TO_ONE)", e);
        }
        if (other == kind || other.aeron()) {
            throw new IllegalArgumentException("ring fill benchmark against=" + against + " with kind=" + kind
                    + ": expected another kind of symmem4j or Agrona (fix: e.g. kind=SYMMEM_MANY_TO_ONE,"
                    + " against=AGRONA_MANY_TO_ONE)");
        }
        return List.of(kind, other);
    }

    /** The lanes' kinds as the peer's variant argument: {@code KIND} or {@code KIND+AGAINST}. */
    static String variant(List<RingPair.Kind> kinds) {
        return String.join("+", kinds.stream().map(Enum::name).toList());
    }

    /** The peer's variant argument back into the lanes' kinds. */
    static List<RingPair.Kind> parseVariant(String variant) {
        String[] names = variant.split("\\+", -1);
        return kinds(RingPair.Kind.valueOf(names[0]), names.length > 1 ? names[1] : NONE);
    }

    /** Lane {@code i}'s file prefix under the trial's. */
    static Path laneFiles(Path files, int i) {
        return Path.of(files + "-lane" + i);
    }

    /**
     * The suites' check of their flags, before any fork starts: every message size fits this benchmark's ring and every
     * level can be held at every size ({@link #fillMessages}); no levels (a round trip holds none): the sizes alone.
     *
     * @throws IllegalArgumentException naming the size or level that does not fit
     */
    static void checkSizesAndFills(int[] sizes, int[] fills) {
        for (int b : sizes) {
            if (b < 1 || b > CAPACITY / 8 - 8) {
                throw new IllegalArgumentException("--sizes: " + b + " bytes, expected 1.." + (CAPACITY / 8 - 8)
                        + " (fix: pass e.g. --sizes 64,256,1024)");
            }
        }
        for (int fill : fills) {
            for (int b : sizes) {
                fillMessages(CAPACITY, b, fill, BATCH);
            }
        }
    }

    /**
     * The fill level in messages: {@code percent} % of the records of {@code messageBytes} a ring of {@code capacity}
     * holds, rounded to a multiple of {@code batch}, at least one batch.
     *
     * @throws IllegalArgumentException when the window {@code T + 2B}, one record of padding at the wrap and the
     *         one-to-one ring's zeroed header do not fit the ring
     */
    static long fillMessages(int capacity, int messageBytes, int percent, int batch) {
        if (percent < 1 || percent > 99) {
            throw new IllegalArgumentException("ring fill percent=" + percent + " expected 1..99 (fix: pass e.g."
                    + " -p fillPercent=25,75)");
        }
        long record = RingBufferLayout.align(messageBytes + RingBufferLayout.RECORD_HEADER_BYTES);
        long records = capacity / record;
        long target = Math.max(batch, Math.round(records * percent / 100.0 / batch) * batch);
        long window = target + 2L * batch;
        if ((window + 1) * record + RingBufferLayout.RECORD_HEADER_BYTES > capacity) {
            throw new IllegalArgumentException("ring fill percent=" + percent + " of messages of bytes=" + messageBytes
                    + ": the window of " + window + " records of " + record + " bytes (the level, 2 batches of "
                    + batch + ", a record of padding) exceeds the ring's capacity=" + capacity + " (fix: a lower"
                    + " fillPercent or smaller messages)");
        }
        return target;
    }

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        BenchCpus.pinCurrentThread(BenchCpus.PRODUCER, "the benchmark's producer thread");
        List<RingPair.Kind> kinds = kinds(kind, against);
        long target = fillMessages(CAPACITY, messageBytes, fillPercent, BATCH);
        window = target + 2L * BATCH;
        files = Path.of("/dev/shm", "symmem4j-ring-bench-fill-" + ProcessHandle.current().pid());
        try {
            for (int i = 0; i < kinds.size(); i++) {
                Lane lane = new Lane(kinds.get(i), laneFiles(files, i));
                lanes.add(lane);
                if (lane.kind.agrona()) {
                    RingPair.createAgronaFiles(lane.files, CAPACITY);
                }
                lane.pacer = FillPacer.create(FillPacer.path(lane.files), target, BATCH);
            }
            peer = PeerProcess.start(GroupOptions.defaults(), BenchPeer.RING_FILL, Integer.toString(CAPACITY),
                    variant(kinds), files.toString());
            for (Lane lane : lanes) {
                lane.rings = RingPair.open(lane.kind, peer.group(), CAPACITY, lane.files, (type, length) -> { });
            }
            peer.group().allGatherBytes("ring-fill-ready", new byte[0]);
        } catch (IOException | RuntimeException | Error e) {
            removeFiles();
            throw e;
        }
        activate(lanes.get(0));
    }

    /**
     * Paired mode: the lane of the coming block ({@link FlightRecorderPairedBenchmark#recorderOn}: {@link #kind}'s when
     * true), warm-up and measured blocks counted apart; the lane left keeps its counters and its ring its level.
     *
     * @param params which kind of iteration comes
     */
    @Setup(Level.Iteration)
    public void choose(IterationParams params) {
        if (lanes.size() < 2) {
            return;
        }
        int k = params.getType() == IterationType.WARMUP ? warmupBlocks++ : measuredBlocks++;
        active.sent = sent;
        active.consumedSeen = consumedSeen;
        activate(lanes.get(FlightRecorderPairedBenchmark.recorderOn(k) ? 0 : 1));
    }

    private void activate(Lane lane) {
        active = lane;
        rings = lane.rings;
        pacer = lane.pacer;
        sent = lane.sent;
        consumedSeen = lane.consumedSeen;
    }

    /** One message into a ring that holds {@code T..T+2B} messages (see the class comment). */
    @Benchmark
    @BenchmarkMode(Mode.Throughput)
    @OutputTimeUnit(TimeUnit.SECONDS)
    public void throughput() {
        long s = sent;
        if (s - consumedSeen >= window) {
            awaitCredit(s);
        }
        if (!rings.send(RingPair.DRAIN, messageBytes)) {
            throw org.symmem4j.parallel.Invariants.violated("ring fill benchmark: " + kind + " refused message " + s
                    + " with " + (s - consumedSeen) + " of at most " + window + " messages of bytes=" + messageBytes
                    + " in the ring: fillMessages sized the window to never fill it");
        }
        sent = ++s;
        if ((s & (BATCH - 1)) == 0) {
            pacer.publishSent(s); // release: the messages counted were committed before it
        }
    }

    private void awaitCredit(long s) {
        long since = 0;
        int spins = 0;
        while (s - (consumedSeen = pacer.consumed()) >= window) {
            RingPair.idle();
            if ((++spins & (SPINS_PER_YIELD - 1)) == 0) {
                Thread.yield();
            }
            if (spins == SPINS_PER_CLOCK) {
                spins = 0;
                long now = System.nanoTime();
                if (since == 0) {
                    since = now;
                } else if (now - since > STALL_NANOS) {
                    throw new IllegalStateException("ring fill benchmark: the consumer (rank 1) read no batch for "
                            + TimeUnit.NANOSECONDS.toSeconds(now - since) + " s (sent=" + s + ", consumed="
                            + consumedSeen + "), expected one within " + TimeUnit.NANOSECONDS.toSeconds(STALL_NANOS)
                            + " s (fix: check bench-peer.log for the peer's error)");
                }
            }
        }
    }

    @TearDown(Level.Trial)
    public void tearDown() throws Exception {
        active.sent = sent;
        for (Lane lane : lanes) {
            lane.pacer.publishSent(lane.sent);
            lane.pacer.stop(); // release, after the last count: the consumer drains up to it and leaves
        }
        peer.group().allGatherBytes("ring-fill-done", new byte[0]);
        for (Lane lane : lanes) {
            lane.rings.close(); // collective, in the peer's order
        }
        peer.close();
        removeFiles();
    }

    private void removeFiles() throws IOException {
        for (Lane lane : lanes) {
            if (lane.pacer != null) {
                lane.pacer.close();
                lane.pacer = null;
            }
            FillPacer.delete(FillPacer.path(lane.files));
            if (lane.kind.agrona()) {
                RingPair.deleteAgronaFiles(lane.files);
            }
        }
        lanes.clear();
    }

    /**
     * Rank 1: the consumer. For each lane (one ring, or two in paired mode), reads a batch of exactly {@link #BATCH}
     * messages whenever the producer's published count leaves at least the fill level in the ring after it; after the
     * producer's stop, drains what is left. Prints each lane's polls per batch to the peer's log (the batching check:
     * 1.0 but for the polls that end at the wrap).
     *
     * @param kinds    which rings, one lane each ({@link #parseVariant})
     * @param group    the 2-rank group
     * @param capacity ring bytes
     * @param files    the trial's file prefix; each lane's files are under it ({@link #laneFiles})
     */
    static void serve(List<RingPair.Kind> kinds, Group group, int capacity, Path files) throws IOException {
        BenchCpus.pinCurrentThread(BenchCpus.CONSUMER, "the peer's consumer thread");
        List<Lane> lanes = new ArrayList<>();
        try {
            for (int i = 0; i < kinds.size(); i++) {
                Lane lane = new Lane(kinds.get(i), laneFiles(files, i));
                lanes.add(lane);
                lane.pacer = FillPacer.open(FillPacer.path(lane.files));
                lane.floor = lane.pacer.target() + lane.pacer.batch();
                lane.rings = RingPair.open(lane.kind, group, capacity, lane.files, (type, length) -> { });
            }
            group.allGatherBytes("ring-fill-ready", new byte[0]);
            Lane[] all = lanes.toArray(Lane[]::new);
            int batch = (int) all[0].pacer.batch();
            long since = 0;
            int spins = 0;
            while (true) {
                boolean idle = true;
                for (Lane lane : all) {
                    if (lane.sentSeen - lane.consumed < lane.floor) {
                        lane.sentSeen = lane.pacer.sent();
                        if (lane.sentSeen - lane.consumed < lane.floor) {
                            continue;
                        }
                    }
                    idle = false;
                    lane.polls += take(lane.rings, batch);
                    lane.consumed += batch;
                    lane.pacer.publishConsumed(lane.consumed); // release: the batch is read (its room freed) before it
                }
                if (!idle) {
                    since = 0;
                    continue;
                }
                if (allStopped(all)) {
                    break;
                }
                RingPair.idle();
                if ((++spins & (SPINS_PER_YIELD - 1)) == 0) {
                    Thread.yield();
                }
                if (spins == SPINS_PER_CLOCK) {
                    spins = 0;
                    since = checkStall(since, all[0].consumed, all[0].sentSeen, all[0].pacer);
                }
            }
            PrintStream log = System.out;
            for (Lane lane : all) {
                long last = lane.pacer.sent(); // the final count, published before the stop this rank acquired
                long batches = lane.consumed / batch;
                while (lane.consumed < last) {
                    int n = (int) Math.min(batch, last - lane.consumed);
                    take(lane.rings, n);
                    lane.consumed += n;
                }
                log.printf(java.util.Locale.ROOT, "ring-fill %s: %d messages, %d batches of %d in %d polls (%.4f polls"
                        + " per batch)%n", lane.kind, lane.consumed, batches, batch, lane.polls,
                        batches == 0 ? 0.0 : (double) lane.polls / batches);
            }
            group.allGatherBytes("ring-fill-done", new byte[0]);
        } finally {
            for (Lane lane : lanes) {
                if (lane.rings != null) {
                    lane.rings.close(); // collective, in rank 0's order
                }
                if (lane.pacer != null) {
                    lane.pacer.close();
                }
            }
        }
    }

    /** Whether the producer has stopped every lane (acquire: their final counts are published before). */
    private static boolean allStopped(Lane[] lanes) {
        for (Lane lane : lanes) {
            if (!lane.pacer.stopped()) {
                return false;
            }
        }
        return true;
    }

    /** Polls until exactly {@code n} messages are read (they are committed: the count said so); returns the polls. */
    private static int take(RingPair pair, int n) {
        int got = 0;
        int polls = 0;
        while (got < n) {
            got += pair.receive(n - got);
            polls++;
        }
        return polls;
    }

    /**
     * The consumer has waited {@link #SPINS_PER_CLOCK} more spins for the producer: a producer that has published
     * nothing for {@link #STALL_NANOS} (dead, or stuck) ends the peer with an error naming it, as the JMH fork's own
     * death ends its group.
     */
    private static long checkStall(long since, long consumed, long sentSeen, FillPacer pacer) {
        long now = System.nanoTime();
        if (since == 0) {
            return now;
        }
        if (now - since > STALL_NANOS) {
            throw new IllegalStateException("ring fill benchmark peer: the producer (rank 0) published no batch for "
                    + TimeUnit.NANOSECONDS.toSeconds(now - since) + " s (sent=" + sentSeen + ", consumed=" + consumed
                    + ", fill level=" + pacer.target() + " messages) and did not stop (fix: check the JMH fork's"
                    + " output)");
        }
        return since;
    }
}
