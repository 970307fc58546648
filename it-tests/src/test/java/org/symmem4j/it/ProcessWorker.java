package org.symmem4j.it;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.Arrays;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CollectiveMismatchException;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.host.SharedMemoryFiles;
import org.symmem4j.parallel.numeric.BFloat16;
import org.symmem4j.pipeline.channel.LinkPlan;
import org.symmem4j.pipeline.exec.AffineStage;
import org.symmem4j.pipeline.exec.PipelineExecutor;
import org.symmem4j.pipeline.exec.StageCompute;
import org.symmem4j.pipeline.schedule.ActionDurations;
import org.symmem4j.pipeline.schedule.PipelineShape;
import org.symmem4j.pipeline.schedule.Schedule;
import org.symmem4j.pipeline.schedule.ScheduleGenerators;

/**
 * One rank of a cross-process test, configured by torchrun's variables. Scenarios:
 * <ul>
 *   <li>{@code collectives}: every algorithm × dtype × op × size (staged and in place on symmetric
 *       memory), reduce-scatter, all-gather, broadcast and a put-with-signal ring, each checked against
 *       the result computed here from every rank's (seeded) input; prints a checksum per case so the
 *       test can compare ranks bitwise; ends with {@code OK}.</li>
 *   <li>{@code loop [iterations [faultyRank faultyIteration [halt]]]}: in-place all-reduces of every rank's
 *       {@code rank + 1}, each result checked against {@code N(N+1)/2} (a result mixed with another
 *       job's prints {@code CORRUPT ...} and exits 4); prints {@code READY} after 200. Without an
 *       iteration count it runs until something fails: then it prints
 *       {@code FAILED <exception>: <message>} (and {@code BLAME [ranks]}, the ranks a
 *       {@link PeerTimeoutException} in it holds responsible) and exits 3. With one it prints {@code SUMS <n>} and
 *       ends. It prints {@code START} before joining, {@code JOINED} once the group formed (its memories are set up
 *       next), {@code MEMBERS <pid>...} once they are; environment
 *       {@code IT_JOB_SALT=s} adds {@code s} to every rank's data (a job's own numbers, so a group mixing two jobs'
 *       ranks computes wrong sums), {@code IT_ALGORITHM} runs one algorithm only, {@code IT_COUNT} sets the floats per all-reduce (4096).
 *       {@code faultyRank} passes a buffer that another of its threads frees while it waits inside the
 *       collective at {@code faultyIteration} (a local failure inside a collective; its peers arrive once
 *       it is freed); with a fifth argument {@code halt} it halts the JVM with code 7 there instead (a
 *       crash); {@code halt-once} does so in the launcher's first generation only
 *       ({@code SYMMEM4J_RESTART_GENERATION} 0), a restarted generation runs without the fault. A group too small
 *       to have the faulty rank (a generation with fewer processes) runs without the fault.</li>
 *   <li>{@code refusals}: a read-only or freed destination on one rank, for every staged collective and
 *       algorithm, and closed symmetric memory on every rank, each refused by every rank before any byte
 *       moves; the group then computes correctly ({@code REFUSED ...} per case, {@code REFUSALS <n>}).</li>
 *   <li>{@code pipeline <gpipe|1f1b|interleaved>}: trains the pipeline test stages
 *       ({@code AffineStage}) for 3 steps with 8 microbatches over stage links in /dev/shm, one
 *       stage (two when interleaved) per process; prints {@code PARAM <stage> <a bits> <b bits>}
 *       for its stages, which the test compares with the sequential reference.</li>
 *   <li>{@code mesh <name=size,...>}, {@code mesh-abort}: device-mesh sub-groups ({@link MeshWorker}).</li>
 *   <li>{@code leak-file}: creates a file named like a symmem4j shared-memory file of this process,
 *       prints its name and {@code READY}, then sleeps (the test kills it and checks the sweep).</li>
 * </ul>
 */
public final class ProcessWorker {

    private ProcessWorker() {
    }

    public static void main(String[] args) throws Exception {
        String scenario = args[0];
        try {
            switch (scenario) {
                case "collectives" -> collectives();
                case "loop" -> loop(args);
                case "refusals" -> refusals();
                case "pipeline" -> pipeline(args[1]);
                case "leak-file" -> leakFile();
                case "mesh" -> MeshWorker.mesh(args[1]);
                case "mesh-abort" -> MeshWorker.meshAbort();
                case "on-transport" -> onTransport();
                default -> throw new IllegalArgumentException("unknown scenario " + scenario);
            }
            System.out.println("OK");
            System.out.flush();
            System.exit(0);
        } catch (Throwable t) {
            System.out.println("FAILED " + t.getClass().getName() + ": " + t.getMessage());
            for (Throwable c = t; c != null; c = c.getCause()) {
                if (c instanceof PeerTimeoutException p) {
                    System.out.println("BLAME " + p.missingRanks()); // the ranks this rank's error holds responsible
                    break;
                }
            }
            t.printStackTrace(System.out);
            System.out.flush();
            System.exit(3);
        }
    }

    /**
     * A process group joined on a transport of its own ({@code ProcessGroup.fromEnvironment(options,
     * transport)}), as a device transport would be: its memories and communicators come from that
     * transport, which here keeps them in the group's host memory ({@code hostTransport()}, /dev/shm),
     * as a device transport keeps its control plane there. Prints {@code ON-TRANSPORT <sum>} after an
     * all-reduce through it.
     */
    private static void onTransport() {
        int[] allocations = new int[1];
        Transport device = new Transport() {
            @Override
            public String name() {
                return "test-device";
            }

            @Override
            public SymmetricMemory allocate(Group group, long bytes) {
                allocations[0]++;
                return group.hostTransport().allocate(group, bytes);
            }

            @Override
            public SymmetricMemory register(Group group, MemorySegment buffer) {
                return group.hostTransport().register(group, buffer);
            }

            @Override
            public Communicator communicator(Group group, CommunicatorOptions options) {
                return group.hostTransport().communicator(group, options);
            }

            @Override
            public TransportCapabilities capabilities(Group group) {
                return group.hostTransport().capabilities(group);
            }
        };
        try (ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults(), device);
             SymmetricMemory mem = SymmetricMemory.allocate(group, 64);
             Communicator comm = Communicator.create(group)) {
            // two allocations went through it: the one above and the communicator's scratch
            if (group.transport() != device || !group.hostTransport().name().equals("host-shm") || allocations[0] != 2) {
                throw new IllegalStateException("transport=" + group.transport().name() + " hostTransport="
                        + group.hostTransport().name() + " allocations through it=" + allocations[0]);
            }
            mem.local().set(ValueLayout.JAVA_FLOAT, 0, group.rank() + 1f);
            comm.allReduce(mem, 0, 1, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
            System.out.println("ON-TRANSPORT " + mem.local().get(ValueLayout.JAVA_FLOAT, 0));
        }
    }

    static final int PIPELINE_MICROBATCHES = 8;
    static final int PIPELINE_STEPS = 3;
    static final int PIPELINE_WIDTH = 256;

    private static void pipeline(String kind) {
        try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
            int p = group.worldSize();
            PipelineShape shape = new PipelineShape(p, PIPELINE_MICROBATCHES, kind.equals("interleaved") ? 2 : 1);
            Schedule schedule = switch (kind) {
                case "gpipe" -> ScheduleGenerators.gpipe(p, PIPELINE_MICROBATCHES);
                case "1f1b" -> ScheduleGenerators.oneFOneB(p, PIPELINE_MICROBATCHES);
                case "interleaved" -> ScheduleGenerators.interleavedOneFOneB(p, PIPELINE_MICROBATCHES, 2);
                default -> throw new IllegalArgumentException("unknown schedule " + kind);
            };
            Map<Integer, StageCompute> stages = new TreeMap<>();
            for (int stage = group.rank(); stage < shape.stageCount(); stage += p) {
                stages.put(stage, new AffineStage(stage, shape.stageCount(), PIPELINE_WIDTH, 0, 0));
            }
            int slots = LinkPlan.of(schedule, shape).stallFreeSlots(ActionDurations.of(1, 2));
            try (PipelineExecutor executor = PipelineExecutor.create(group, schedule, shape, stages, slots,
                    4L * PIPELINE_WIDTH)) {
                for (int step = 0; step < PIPELINE_STEPS; step++) {
                    executor.runStep();
                }
            }
            stages.forEach((stage, compute) -> {
                AffineStage affine = (AffineStage) compute;
                System.out.println("PARAM " + stage + " " + Float.floatToRawIntBits(affine.a) + " "
                        + Float.floatToRawIntBits(affine.b));
            });
        }
    }

    private static void collectives() {
        try (ProcessGroup group = ProcessGroup.fromEnvironment();
             Communicator comm = Communicator.create(group);
             Arena arena = Arena.ofShared()) {
            int n = group.worldSize();
            int rank = group.rank();
            long maxBytes = 1 << 20;
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, maxBytes)) {
                MemorySegment plain = arena.allocate(maxBytes, 64);
                int caseId = 0;
                for (Algorithm algorithm : new Algorithm[] {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING}) {
                    for (DType dtype : DType.values()) {
                        for (ReduceOp op : ReduceOp.values()) {
                            for (int count : new int[] {0, 1, 1001, (int) (maxBytes / dtype.byteSize())}) {
                                for (boolean inPlace : new boolean[] {false, true}) {
                                    caseId++;
                                    MemorySegment buf = inPlace ? mem.local() : plain;
                                    write(buf, dtype, input(caseId, rank, count, dtype));
                                    if (inPlace) {
                                        comm.allReduce(mem, 0, count, dtype, op, algorithm);
                                    } else {
                                        comm.allReduce(plain, count, dtype, op, algorithm);
                                    }
                                    check(buf, dtype, op, algorithm, caseId, n, count);
                                    System.out.println("CHECKSUM " + caseId + " " + Arrays.hashCode(
                                            buf.asSlice(0, dtype.bytes(count)).toArray(ValueLayout.JAVA_BYTE)));
                                }
                            }
                        }
                    }
                }
                // reduce-scatter / all-gather / broadcast on float32 integers: exact
                int block = 3001;
                MemorySegment send = arena.allocate(4L * block * n);
                MemorySegment recv = arena.allocate(4L * block * n);
                for (int i = 0; i < block * n; i++) {
                    send.setAtIndex(ValueLayout.JAVA_FLOAT, i, i + rank);
                }
                comm.reduceScatter(send, recv, block, DType.FLOAT32, ReduceOp.SUM);
                for (int i = 0; i < block; i++) {
                    expect(n * (rank * block + i) + n * (n - 1) / 2f, recv.getAtIndex(ValueLayout.JAVA_FLOAT, i), "reduce-scatter", i);
                }
                comm.allGather(send.asSlice(0, 4L * block), recv, block, DType.FLOAT32);
                for (int q = 0; q < n; q++) {
                    for (int i = 0; i < block; i++) {
                        expect(i + q, recv.getAtIndex(ValueLayout.JAVA_FLOAT, (long) q * block + i), "all-gather", i);
                    }
                }
                for (int root = 0; root < n; root++) {
                    for (int i = 0; i < block; i++) {
                        recv.setAtIndex(ValueLayout.JAVA_FLOAT, i, rank == root ? 1000 + i : -1);
                    }
                    comm.broadcast(recv, block, DType.FLOAT32, root);
                    for (int i = 0; i < block; i++) {
                        expect(1000 + i, recv.getAtIndex(ValueLayout.JAVA_FLOAT, i), "broadcast", i);
                    }
                }
                // put-with-signal around the ring: each rank puts its rank into its right neighbour
                MemorySegment token = arena.allocate(4096);
                for (int round = 1; round <= 200; round++) {
                    token.fill((byte) (rank + round));
                    mem.putWithSignal((rank + 1) % n, token, 0, 0, round, SignalOp.SET);
                    mem.waitSignal(0, round, (rank - 1 + n) % n);
                    byte expected = (byte) ((rank - 1 + n) % n + round);
                    if (mem.local().get(ValueLayout.JAVA_BYTE, 4095) != expected) {
                        throw new AssertionError("put-with-signal round " + round + ": data not visible after signal");
                    }
                    mem.barrier(); // nobody overwrites before the neighbour checked
                }
            }
        }
    }

    private static double[] input(int caseId, int rank, int count, DType dtype) {
        SplittableRandom rnd = new SplittableRandom(caseId * 1000L + rank);
        double[] v = new double[count];
        for (int i = 0; i < count; i++) {
            double x = rnd.nextDouble(-1, 1);
            v[i] = switch (dtype) {
                case FLOAT64 -> x;
                case FLOAT32 -> (float) x;
                case BFLOAT16 -> BFloat16.toFloat(BFloat16.fromFloat((float) x));
            };
        }
        return v;
    }

    private static void write(MemorySegment seg, DType dtype, double[] v) {
        for (int i = 0; i < v.length; i++) {
            switch (dtype) {
                case FLOAT64 -> seg.setAtIndex(ValueLayout.JAVA_DOUBLE, i, v[i]);
                case FLOAT32 -> seg.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) v[i]);
                case BFLOAT16 -> seg.setAtIndex(ValueLayout.JAVA_SHORT, i, BFloat16.fromFloat((float) v[i]));
            }
        }
    }

    private static double read(MemorySegment seg, DType dtype, int i) {
        return switch (dtype) {
            case FLOAT64 -> seg.getAtIndex(ValueLayout.JAVA_DOUBLE, i);
            case FLOAT32 -> seg.getAtIndex(ValueLayout.JAVA_FLOAT, i);
            case BFLOAT16 -> BFloat16.toFloat(seg.getAtIndex(ValueLayout.JAVA_SHORT, i));
        };
    }

    /** Against the float64 reference with the N·u·Σ|x| bound; exact (0 tolerance) for MAX and MIN. */
    private static void check(MemorySegment buf, DType dtype, ReduceOp op, Algorithm algorithm, int caseId, int n, int count) {
        double[][] in = new double[n][];
        for (int r = 0; r < n; r++) {
            in[r] = input(caseId, r, count, dtype);
        }
        double uAcc = dtype == DType.FLOAT64 ? 0x1p-53 : 0x1p-24;
        double uOut = dtype == DType.BFLOAT16 ? 0x1p-8 : uAcc;
        for (int i = 0; i < count; i++) {
            double ref = in[0][i];
            double abs = Math.abs(in[0][i]);
            for (int r = 1; r < n; r++) {
                ref = switch (op) {
                    case SUM, AVG -> ref + in[r][i];
                    case MAX -> Math.max(ref, in[r][i]);
                    case MIN -> Math.min(ref, in[r][i]);
                };
                abs += Math.abs(in[r][i]);
            }
            double scale = 1;
            if (op == ReduceOp.AVG) {
                ref /= n;
                scale = 1.0 / n;
            }
            double tol = op == ReduceOp.MAX || op == ReduceOp.MIN ? 0
                    : 2 * ((n + 1) * uAcc * abs * scale + uOut * Math.abs(ref)) + Double.MIN_NORMAL;
            double got = read(buf, dtype, i);
            if (!(Math.abs(got - ref) <= tol)) {
                throw new AssertionError(algorithm + " " + dtype + " " + op + " count=" + count + " element " + i
                        + " got=" + got + " reference=" + ref + " tolerance=" + tol);
            }
        }
    }

    private static void expect(float expected, float got, String what, int i) {
        if (expected != got) {
            throw new AssertionError(what + " element " + i + " got=" + got + " expected=" + expected);
        }
    }

    /** Environment variable of the {@code loop} scenario: a number (default 0) every rank of the job adds to its data. */
    static final String JOB_SALT_ENV = "IT_JOB_SALT";
    /** Environment variable of the {@code loop} scenario: the one algorithm to run (default: ONE_SHOT, TWO_SHOT, RING in turn). */
    static final String ALGORITHM_ENV = "IT_ALGORITHM";
    /** Environment variable of the {@code loop} scenario: floats per all-reduce (default 4096). */
    static final String COUNT_ENV = "IT_COUNT";

    private static void loop(String[] args) {
        long iterations = args.length > 1 ? Long.parseLong(args[1]) : Long.MAX_VALUE;
        String mode = args.length > 4 ? args[4] : "";
        // halt-once: the fault of the job's first start only; a restarted generation runs clean
        boolean faulty = args.length > 3 && !(mode.equals("halt-once") && Configuration.RESTART_GENERATION.get() > 0);
        int faultyRank = faulty ? Integer.parseInt(args[2]) : -1;
        long faultyIteration = faulty ? Long.parseLong(args[3]) : -1;
        boolean halt = mode.equals("halt") || mode.equals("halt-once");
        int count = Integer.parseInt(System.getenv().getOrDefault(COUNT_ENV, "4096"));
        System.out.println("START");
        System.out.flush();
        try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
            System.out.println("JOINED");
            System.out.flush();
            loop(group, iterations, faultyRank, faultyIteration, halt, !halt && faultyRank >= 0, count);
        }
    }

    private static void loop(ProcessGroup group, long iterations, int faultyRank, long faultyIteration, boolean halt,
                             boolean freed, int count) {
        try (Communicator comm = Communicator.create(group);
             SymmetricMemory mem = SymmetricMemory.allocate(group, 4L * count);
             Arena arena = Arena.ofConfined()) {
            System.out.println("RUN " + group.identity().runId() + " generation " + group.identity().generation());
            StringBuilder members = new StringBuilder("MEMBERS");
            for (int r = 0; r < group.worldSize(); r++) {
                members.append(' ').append(group.pid(r));
            }
            System.out.println(members);
            System.out.flush();
            int n = group.worldSize();
            if (faultyRank >= n) { // a generation with fewer processes (--nproc-per-node MIN:MAX): the faulty one is gone
                faultyRank = -1;
                faultyIteration = -1;
            }
            // a job's own data: salt + rank + 1 on every rank, so a group that mixes two jobs' ranks sums wrongly
            float salt = Integer.parseInt(System.getenv().getOrDefault(JOB_SALT_ENV, "0"));
            float expected = n * salt + n * (n + 1) / 2f;
            String only = System.getenv(ALGORITHM_ENV);
            Algorithm[] algorithms = only == null ? new Algorithm[] {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING}
                    : new Algorithm[] {Algorithm.valueOf(only)};
            for (long it = 0; it < iterations; it++) {
                Algorithm algorithm = algorithms[(int) (it % algorithms.length)];
                if (group.rank() == faultyRank && it == faultyIteration && halt) {
                    System.out.println("HALT with code 7 at iteration " + it);
                    System.out.flush();
                    Runtime.getRuntime().halt(7); // a crash: no close, no abort, no message to the peers
                }
                if (group.rank() == faultyRank && it == faultyIteration && freed) {
                    System.out.println("FAULT buffer freed inside the collective at iteration " + it);
                    System.out.flush();
                    comm.allReduce(freedWhileWaiting(mem, faultyRank, 4L * count), count, DType.FLOAT32, ReduceOp.SUM,
                            algorithm);
                } else if (it == faultyIteration) {
                    mem.waitSignal(0, 1, faultyRank); // the faulty rank's buffer is freed: arrive now
                    comm.allReduce(arena.allocate(4L * count, 64), count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                } else {
                    mem.local().asSlice(0, 4L * count).fill((byte) 0);
                    for (int i = 0; i < count; i++) {
                        mem.local().setAtIndex(ValueLayout.JAVA_FLOAT, i, salt + group.rank() + 1);
                    }
                    comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                    for (int i = 0; i < count; i += 97) {
                        float got = mem.local().getAtIndex(ValueLayout.JAVA_FLOAT, i);
                        if (got != expected) {
                            System.out.println("CORRUPT iteration " + it + " element " + i + " got " + got + " expected "
                                    + expected);
                            System.out.flush();
                            System.exit(4);
                        }
                    }
                }
                if (it == 200) {
                    System.out.println("READY");
                    System.out.flush();
                }
            }
            System.out.println("SUMS " + iterations);
        }
    }

    /**
     * A buffer that is fine when the collective starts and freed inside it: another thread frees it
     * once this thread parks (at the entry barrier, past its argument checks), then signals slot 0 of
     * every other rank, which arrives only then. The collective then fails on this rank writing its
     * result — a local failure inside a collective, which no rank can see before it.
     */
    private static MemorySegment freedWhileWaiting(SymmetricMemory mem, int self, long bytes) {
        Arena doomed = Arena.ofShared();
        MemorySegment buffer = doomed.allocate(bytes, 64);
        Thread rankThread = Thread.currentThread();
        Thread.ofPlatform().daemon().name("frees-the-buffer").start(() -> {
            while (rankThread.getState() != Thread.State.TIMED_WAITING && rankThread.getState() != Thread.State.WAITING) {
                Thread.onSpinWait();
            }
            doomed.close();
            for (int p = 0; p < mem.group().worldSize(); p++) {
                if (p != self) {
                    mem.signal(p, 0, 1, SignalOp.SET);
                }
            }
        });
        return buffer;
    }

    /**
     * One rank of {@code refusals}: for each staged collective and algorithm, one rank (in turn) passes a
     * read-only destination, then a freed one, then every rank passes symmetric memory it closed. Every
     * rank must throw {@link CollectiveMismatchException} naming the bad rank (or every rank, for the
     * closed memory), its buffers unchanged byte for byte, and then run the same collective correctly:
     * results equal to the float64 reference exactly (the inputs are small multiples of 1/4). Prints
     * {@code REFUSED <case> rank=<bad>: <message>} per case and {@code REFUSALS <cases>}; a refused
     * call that wrote a buffer prints {@code CORRUPT ...} and exits 4.
     */
    private static void refusals() {
        int count = 3000; // three pieces of the 4096-byte staging halves below
        try (ProcessGroup group = ProcessGroup.fromEnvironment();
             Communicator comm = Communicator.create(group, new CommunicatorOptions(4096, 512));
             Arena arena = Arena.ofConfined()) {
            int n = group.worldSize();
            String[] kinds = {"all-reduce/ONE_SHOT", "all-reduce/TWO_SHOT", "all-reduce/RING", "reduce-scatter", "all-gather",
                    "broadcast"};
            int cases = 0;
            for (String defect : new String[] {"read-only", "freed"}) {
                for (String kind : kinds) {
                    refusal(comm, arena, kind, defect, cases++ % n, count);
                }
            }
            SymmetricMemory closed = SymmetricMemory.allocate(group, 4L * count);
            closed.close(); // collective: every rank closes it
            try {
                comm.allReduce(closed, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.RING);
                throw new AssertionError("all-reduce on closed symmetric memory was not refused on rank " + group.rank());
            } catch (CollectiveMismatchException e) {
                for (int r = 0; r < n; r++) {
                    if (!e.getMessage().contains("rank=" + r + " buffer memory is freed")) {
                        throw new AssertionError("refusal does not name rank " + r + ": " + e.getMessage());
                    }
                }
                System.out.println("REFUSED in-place all-reduce/RING closed rank=all: " + e.getMessage());
                cases++;
            }
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, 4L * count)) {
                for (int i = 0; i < count; i++) {
                    mem.local().setAtIndex(ValueLayout.JAVA_FLOAT, i, refusalInput(group.rank(), i));
                }
                comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.RING);
                for (int i = 0; i < count; i++) {
                    double ref = 0;
                    for (int r = 0; r < n; r++) {
                        ref += refusalInput(r, i);
                    }
                    expect((float) ref, mem.local().getAtIndex(ValueLayout.JAVA_FLOAT, i), "in-place RING after a refusal", i);
                }
            }
            System.out.println("REFUSALS " + cases);
        }
    }

    /** Rank {@code r}'s element {@code i}: a small multiple of 1/4, so every sum is exact in FLOAT32. */
    private static float refusalInput(int r, int i) {
        return (r + 1) * 0.5f + (i % 17) * 0.25f;
    }

    private static void refusal(Communicator comm, Arena arena, String kind, String defect, int bad, int count) {
        int n = comm.group().worldSize();
        int me = comm.group().rank();
        boolean oneBuffer = kind.startsWith("all-reduce") || kind.equals("broadcast");
        int sendCount = kind.equals("reduce-scatter") ? n * count : count;
        MemorySegment send = arena.allocate(4L * sendCount, 64);
        for (int i = 0; i < sendCount; i++) {
            send.setAtIndex(ValueLayout.JAVA_FLOAT, i, refusalInput(me, i));
        }
        MemorySegment dst = oneBuffer ? send : arena.allocate(4L * (kind.equals("all-gather") ? n * count : count), 64);
        if (!oneBuffer) {
            dst.fill((byte) 0x5a);
        }
        int root = (bad + 1) % n; // broadcast: the bad rank receives
        byte[] sendBefore = send.toArray(ValueLayout.JAVA_BYTE);
        byte[] dstBefore = dst.toArray(ValueLayout.JAVA_BYTE);
        MemorySegment badDst = dst;
        if (me == bad) {
            if (defect.equals("read-only")) {
                badDst = dst.asReadOnly();
            } else {
                try (Arena gone = Arena.ofShared()) {
                    badDst = gone.allocate(dst.byteSize(), 64);
                }
            }
        }
        try {
            collective(comm, kind, oneBuffer ? badDst : send, badDst, count, root);
            throw new AssertionError(kind + " with a " + defect + " destination on rank " + bad + " was not refused on rank " + me);
        } catch (CollectiveMismatchException e) {
            if (!e.getMessage().contains("rejected: rank=" + bad + " ")) {
                throw new AssertionError("refusal does not name rank " + bad + ": " + e.getMessage(), e);
            }
            System.out.println("REFUSED " + kind + " " + defect + " rank=" + bad + ": " + e.getMessage());
        }
        if (!Arrays.equals(sendBefore, send.toArray(ValueLayout.JAVA_BYTE))
                || !Arrays.equals(dstBefore, dst.toArray(ValueLayout.JAVA_BYTE))) {
            System.out.println("CORRUPT a refused " + kind + " wrote rank " + me + "'s buffers");
            System.out.flush();
            System.exit(4);
        }
        collective(comm, kind, send, dst, count, root);
        for (int i = 0; i < (kind.equals("all-gather") ? n * count : count); i++) {
            double ref = 0;
            switch (kind) {
                case "reduce-scatter" -> {
                    for (int r = 0; r < n; r++) {
                        ref += refusalInput(r, me * count + i);
                    }
                }
                case "all-gather" -> ref = refusalInput(i / count, i % count);
                case "broadcast" -> ref = refusalInput(root, i);
                default -> {
                    for (int r = 0; r < n; r++) {
                        ref += refusalInput(r, i);
                    }
                }
            }
            expect((float) ref, dst.getAtIndex(ValueLayout.JAVA_FLOAT, i), kind + " after a refused " + defect + " call", i);
        }
    }

    private static void collective(Communicator comm, String kind, MemorySegment send, MemorySegment dst, int count, int root) {
        switch (kind) {
            case "reduce-scatter" -> comm.reduceScatter(send, dst, count, DType.FLOAT32, ReduceOp.SUM);
            case "all-gather" -> comm.allGather(send, dst, count, DType.FLOAT32);
            case "broadcast" -> comm.broadcast(dst, count, DType.FLOAT32, root);
            default -> comm.allReduce(dst, count, DType.FLOAT32, ReduceOp.SUM, Algorithm.valueOf(kind.substring("all-reduce/".length())));
        }
    }

    private static void leakFile() throws Exception {
        ProcessHandle self = ProcessHandle.current();
        long start = self.info().startInstant().map(Instant::toEpochMilli).orElse(0L);
        Path file = SharedMemoryFiles.directory().resolve(SharedMemoryFiles.PREFIX + self.pid() + "-" + start + "-0badc0ffee00-r0");
        Files.write(file, new byte[4096]);
        System.out.println("FILE " + file.getFileName());
        System.out.println("READY");
        System.out.flush();
        Thread.sleep(600_000);
    }
}
