package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * A buffer that one rank can tell is unusable on its own — read-only where the collective writes it,
 * freed (its arena closed), or confined to another thread — is refused on every rank, before any
 * byte moves, for every collective and algorithm: every rank throws the same
 * {@link CollectiveMismatchException} naming the bad rank, no rank's buffers change (compared with a
 * copy taken before), and the same communicator then runs the same collective correctly (against the
 * float64 reference). The counts take several staging pieces and several ring segments
 * ({@code stagingBytes} 4096, {@code ringSegmentBytes} 512).
 *
 * <p>Before this check travelled in the ranks' descriptors, the bad rank found the problem inside the
 * collective: with ONE_SHOT, reduce-scatter, all-gather and broadcast its peers returned normally
 * while it threw; with TWO_SHOT and RING every rank threw after peers had written their buffers; and
 * the group was aborted.
 */
@Timeout(120)
class UnusableBufferTest {

    private static final int N = 4;
    /** FLOAT32 elements: 12,000 bytes, three pieces of the 4096-byte staging halves. */
    private static final int COUNT = 3000;
    private static final DType DT = DType.FLOAT32;
    private static final GroupOptions GROUP = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));
    private static final CommunicatorOptions SMALL = new CommunicatorOptions(4096, 512);

    /** Every entry point of the communicator that writes a caller's memory. */
    enum Collective {
        ALL_REDUCE_ONE_SHOT, ALL_REDUCE_TWO_SHOT, ALL_REDUCE_RING, REDUCE_SCATTER, ALL_GATHER, BROADCAST,
        IN_PLACE_ALL_REDUCE_ONE_SHOT, IN_PLACE_ALL_REDUCE_TWO_SHOT, IN_PLACE_ALL_REDUCE_RING, IN_PLACE_REDUCE_SCATTER,
        IN_PLACE_ALL_GATHER;

        boolean inPlace() {
            return name().startsWith("IN_PLACE");
        }

        Algorithm algorithm() {
            return name().endsWith("ONE_SHOT") ? Algorithm.ONE_SHOT : name().endsWith("TWO_SHOT") ? Algorithm.TWO_SHOT
                    : Algorithm.RING;
        }

        /** Elements of each rank's input: the send buffer, or the symmetric region. */
        int inputCount() {
            return this == REDUCE_SCATTER ? N * COUNT : COUNT;
        }

        /** What the refusal calls the destination. */
        String destination() {
            return inPlace() ? "memory" : this == REDUCE_SCATTER || this == ALL_GATHER ? "recv" : "buffer";
        }
    }

    /** What is wrong with the bad rank's destination, and what the refusal says. */
    enum Defect {
        READ_ONLY("is read-only: isReadOnly=true expected=false"),
        FREED("memory is freed: alive=false expected=true"),
        CONFINED("is confined to another thread: accessibleByRankThread=false expected=true");

        final String says;

        Defect(String says) {
            this.says = says;
        }
    }

    static List<Arguments> cases() {
        List<Arguments> all = new ArrayList<>();
        for (Collective c : Collective.values()) {
            for (Defect d : Defect.values()) {
                all.add(Arguments.of(c, d));
            }
        }
        return all;
    }

    /** Rank {@code r}'s input for collective {@code c}: values exact in FLOAT32. */
    private static double[] input(Collective c, int r) {
        return TestData.random(1000L * (c.ordinal() + 1) + r, c.inputCount(), DT);
    }

    /** A native segment holding {@code values} as FLOAT32. */
    private static MemorySegment filled(Arena arena, double[] values) {
        MemorySegment s = arena.allocate(4L * values.length, 64);
        TestData.write(s, 0, DT, values);
        return s;
    }

    private static byte[] bytes(MemorySegment s) {
        return s.toArray(ValueLayout.JAVA_BYTE);
    }

    /** A thread that owns a confined arena: segments from it are not accessible from a rank's thread. */
    private static final class Elsewhere implements AutoCloseable {
        private final ExecutorService owner = Executors.newSingleThreadExecutor();
        private final Arena arena;

        Elsewhere() throws Exception {
            arena = owner.submit(Arena::ofConfined).get();
        }

        /** Memory of the owner's confined arena (allocated on the owner's thread, as a confined arena requires). */
        MemorySegment allocate(long bytes) {
            try {
                return owner.submit(() -> arena.allocate(bytes, 64)).get();
            } catch (InterruptedException | ExecutionException e) {
                throw new IllegalStateException(e);
            }
        }

        @Override
        public void close() throws Exception {
            owner.submit(arena::close).get();
            owner.shutdown();
        }
    }

    /** A segment of {@code bytes} whose memory is already freed. */
    private static MemorySegment freed(long bytes) {
        try (Arena gone = Arena.ofShared()) {
            return gone.allocate(bytes, 64);
        }
    }

    /**
     * The bad rank's staged destination with {@code defect}: for READ_ONLY a read-only view of
     * {@code good} (so the check that nothing was written covers the bad rank's memory too), else
     * other memory of the same size.
     */
    private static MemorySegment defective(Defect defect, MemorySegment good, Elsewhere elsewhere) {
        return switch (defect) {
            case READ_ONLY -> good.asReadOnly();
            case FREED -> freed(good.byteSize());
            case CONFINED -> elsewhere.allocate(good.byteSize());
        };
    }

    @ParameterizedTest(name = "{0} {1}")
    @MethodSource("cases")
    void anUnusableDestinationOnOneRankIsRefusedOnEveryRankBeforeAnyByteMoves(Collective c, Defect defect) {
        int bad = (c.ordinal() + defect.ordinal()) % N;
        int root = (bad + 1) % N; // broadcast: the bad rank receives
        List<String> messages = InJvmWorld.runOnEveryRank(N, GROUP, group -> {
            int me = group.rank();
            try (Communicator comm = Communicator.create(group, SMALL);
                 Arena arena = Arena.ofShared();
                 Elsewhere elsewhere = new Elsewhere()) {
                double[] mine = input(c, me);
                SymmemException refused;
                if (c.inPlace()) {
                    MemorySegment own = filled(arena, mine);
                    byte[] before = bytes(own);
                    if (defect == Defect.CONFINED) {
                        // peers' threads could never read it: register itself refuses it, on every rank
                        MemorySegment registered = me == bad ? elsewhere.allocate(own.byteSize()) : own;
                        refused = assertThrows(SymmemException.class, () -> SymmetricMemory.register(group, registered),
                                "rank " + me + " must refuse");
                    } else {
                        // register is collective: every rank registers, the bad rank a read-only view of its
                        // buffer, or a buffer it frees after registering it
                        Arena doomed = Arena.ofShared();
                        MemorySegment registered = me != bad ? own
                                : defect == Defect.READ_ONLY ? own.asReadOnly() : doomed.allocate(own.byteSize(), 64);
                        try (SymmetricMemory badCall = SymmetricMemory.register(group, registered)) {
                            doomed.close();
                            refused = assertThrows(CollectiveMismatchException.class, () -> run(c, comm, badCall, root),
                                    "rank " + me + " must refuse");
                        }
                    }
                    assertArrayEquals(before, bytes(own), "rank " + me + ": a refused call wrote its region");
                    try (SymmetricMemory mem = SymmetricMemory.allocate(group, 4L * COUNT)) {
                        TestData.write(mem.local(), 0, DT, mine);
                        run(c, comm, mem, root);
                        check(c, me, mem.local(), root);
                    }
                } else {
                    MemorySegment send = filled(arena, mine);
                    MemorySegment dst = arena.allocate(4L * (c == Collective.ALL_GATHER ? N * COUNT : COUNT), 64);
                    if (c == Collective.ALL_REDUCE_ONE_SHOT || c == Collective.ALL_REDUCE_TWO_SHOT
                            || c == Collective.ALL_REDUCE_RING || c == Collective.BROADCAST) {
                        dst = send; // one buffer: input and destination
                    } else {
                        dst.fill((byte) 0x5a);
                    }
                    byte[] sendBefore = bytes(send);
                    byte[] dstBefore = bytes(dst);
                    MemorySegment badDst = me == bad ? defective(defect, dst, elsewhere) : dst;
                    MemorySegment badSend = send == dst ? badDst : send;
                    refused = assertThrows(CollectiveMismatchException.class, () -> run(c, comm, badSend, badDst, root),
                            "rank " + me + " must refuse");
                    assertArrayEquals(sendBefore, bytes(send), "rank " + me + ": a refused call wrote its input");
                    assertArrayEquals(dstBefore, bytes(dst), "rank " + me + ": a refused call wrote its destination");
                    run(c, comm, send, dst, root); // the same communicator, usable
                    check(c, me, dst, root);
                }
                return refused.getMessage();
            }
        });
        assertEquals(1, messages.stream().distinct().count(), "every rank reports the same refusal: " + messages);
        String m = messages.getFirst();
        if (c.inPlace() && defect == Defect.CONFINED) {
            assertTrue(m.contains("register refused on every rank: rank=" + bad + "'s segment: it is confined to one thread:"
                    + " accessibleByPeerThreads=false expected=true"), m);
            return;
        }
        assertTrue(m.contains("rejected: rank=" + bad + " "), "names the bad rank " + bad + ": " + m);
        assertTrue(m.contains(defect.says), m);
        if (defect == Defect.READ_ONLY) {
            assertTrue(m.contains("rank=" + bad + " " + c.destination() + " is read-only"), m);
        }
        for (int r = 0; r < N; r++) {
            assertTrue(r == bad || !m.contains("rank=" + r + " "), "only rank " + bad + " is blamed: " + m);
        }
    }

    /** Inputs are read too: a freed send buffer on one rank is refused everywhere (it used to abort the group). */
    @ParameterizedTest(name = "{0}")
    @MethodSource("stagedWithSend")
    void aFreedSendBufferIsRefusedOnEveryRank(Collective c) {
        int bad = 2;
        List<String> messages = InJvmWorld.runOnEveryRank(N, GROUP, group -> {
            int me = group.rank();
            try (Communicator comm = Communicator.create(group, SMALL); Arena arena = Arena.ofShared()) {
                MemorySegment send = filled(arena, input(c, me));
                MemorySegment dst = arena.allocate(4L * (c == Collective.ALL_GATHER ? N * COUNT : COUNT), 64);
                byte[] before = bytes(dst);
                MemorySegment badSend = me == bad ? freed(send.byteSize()) : send;
                CollectiveMismatchException e = assertThrows(CollectiveMismatchException.class,
                        () -> run(c, comm, badSend, dst, 0));
                assertArrayEquals(before, bytes(dst), "rank " + me + ": a refused call wrote its destination");
                run(c, comm, send, dst, 0);
                check(c, me, dst, 0);
                return e.getMessage();
            }
        });
        assertEquals(1, messages.stream().distinct().count(), messages.toString());
        assertTrue(messages.getFirst().contains("rank=" + bad + " buffer memory is freed"), messages.getFirst());
    }

    static List<Collective> stagedWithSend() {
        return List.of(Collective.REDUCE_SCATTER, Collective.ALL_GATHER);
    }

    /** The root only reads its buffer: a read-only root buffer is fine, and every rank gets its data. */
    @Test
    void aReadOnlyBufferOnTheBroadcastRootIsAccepted() {
        Collective c = Collective.BROADCAST;
        int root = 1;
        InJvmWorld.runOnEveryRank(N, GROUP, group -> {
            int me = group.rank();
            try (Communicator comm = Communicator.create(group, SMALL); Arena arena = Arena.ofShared()) {
                MemorySegment buf = filled(arena, input(c, me));
                comm.broadcast(me == root ? buf.asReadOnly() : buf, COUNT, DT, root);
                check(c, me, buf, root);
                return null;
            }
        });
    }

    /**
     * Symmetric memory closed on every rank (its close is collective) and then passed to a collective:
     * every rank reports it, and nothing is aborted.
     */
    @Test
    void closedSymmetricMemoryIsRefusedOnEveryRank() {
        List<String> messages = InJvmWorld.runOnEveryRank(N, GROUP, group -> {
            try (Communicator comm = Communicator.create(group, SMALL)) {
                SymmetricMemory closed = SymmetricMemory.allocate(group, 4L * COUNT);
                closed.close();
                List<String> seen = new ArrayList<>();
                for (Algorithm a : List.of(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING)) {
                    seen.add(assertThrows(CollectiveMismatchException.class,
                            () -> comm.allReduce(closed, 0, COUNT, DT, ReduceOp.SUM, a)).getMessage());
                }
                seen.add(assertThrows(CollectiveMismatchException.class,
                        () -> comm.reduceScatter(closed, 0, COUNT, DT, ReduceOp.SUM)).getMessage());
                seen.add(assertThrows(CollectiveMismatchException.class,
                        () -> comm.allGather(closed, 0, COUNT, DT)).getMessage());
                Collective c = Collective.IN_PLACE_ALL_REDUCE_TWO_SHOT;
                try (SymmetricMemory mem = SymmetricMemory.allocate(group, 4L * COUNT)) {
                    TestData.write(mem.local(), 0, DT, input(c, group.rank()));
                    run(c, comm, mem, 0);
                    check(c, group.rank(), mem.local(), 0);
                }
                return String.join("\n", seen);
            }
        });
        assertEquals(1, messages.stream().distinct().count(), messages.toString());
        for (String m : messages.getFirst().split("\n")) {
            for (int r = 0; r < N; r++) {
                assertTrue(m.contains("rank=" + r + " buffer memory is freed"), m);
            }
        }
    }

    private static void run(Collective c, Communicator comm, MemorySegment send, MemorySegment dst, int root) {
        switch (c) {
            case ALL_REDUCE_ONE_SHOT, ALL_REDUCE_TWO_SHOT, ALL_REDUCE_RING ->
                    comm.allReduce(dst, COUNT, DT, ReduceOp.SUM, c.algorithm());
            case REDUCE_SCATTER -> comm.reduceScatter(send, dst, COUNT, DT, ReduceOp.SUM);
            case ALL_GATHER -> comm.allGather(send, dst, COUNT, DT);
            case BROADCAST -> comm.broadcast(dst, COUNT, DT, root);
            default -> throw new IllegalArgumentException(c + " runs in place");
        }
    }

    private static void run(Collective c, Communicator comm, SymmetricMemory mem, int root) {
        switch (c) {
            case IN_PLACE_ALL_REDUCE_ONE_SHOT, IN_PLACE_ALL_REDUCE_TWO_SHOT, IN_PLACE_ALL_REDUCE_RING ->
                    comm.allReduce(mem, 0, COUNT, DT, ReduceOp.SUM, c.algorithm());
            case IN_PLACE_REDUCE_SCATTER -> comm.reduceScatter(mem, 0, COUNT, DT, ReduceOp.SUM);
            case IN_PLACE_ALL_GATHER -> comm.allGather(mem, 0, COUNT, DT);
            default -> throw new IllegalArgumentException(c + " is not in place");
        }
    }

    /** Rank {@code me}'s result of a correct call ({@code dst}: the destination, or the region in place) against the float64 reference. */
    private static void check(Collective c, int me, MemorySegment dst, int root) {
        double[][] in = new double[N][];
        for (int r = 0; r < N; r++) {
            in[r] = input(c, r);
        }
        ShardPartition blocks = ShardPartition.of(COUNT, N, DT);
        switch (c) {
            case ALL_REDUCE_ONE_SHOT, ALL_REDUCE_TWO_SHOT, ALL_REDUCE_RING, IN_PLACE_ALL_REDUCE_ONE_SHOT,
                 IN_PLACE_ALL_REDUCE_TWO_SHOT, IN_PLACE_ALL_REDUCE_RING -> {
                for (int i = 0; i < COUNT; i++) {
                    expectSum(in, i, TestData.get(dst, 0, DT, i), c + " rank " + me + " element " + i);
                }
            }
            case REDUCE_SCATTER -> {
                for (int i = 0; i < COUNT; i++) {
                    expectSum(in, me * COUNT + i, TestData.get(dst, 0, DT, i), c + " rank " + me + " element " + i);
                }
            }
            case ALL_GATHER -> {
                for (int q = 0; q < N; q++) {
                    for (int i = 0; i < COUNT; i++) {
                        assertEquals(in[q][i], TestData.get(dst, 0, DT, (long) q * COUNT + i), c + " block " + q + " element " + i);
                    }
                }
            }
            case BROADCAST -> {
                for (int i = 0; i < COUNT; i++) {
                    assertEquals(in[root][i], TestData.get(dst, 0, DT, i), c + " rank " + me + " element " + i);
                }
            }
            case IN_PLACE_REDUCE_SCATTER -> {
                for (int i = 0; i < COUNT; i++) {
                    boolean own = i >= blocks.start(me) && i < blocks.start(me) + blocks.size(me);
                    double got = TestData.get(dst, 0, DT, i);
                    if (own) {
                        expectSum(in, i, got, c + " rank " + me + " element " + i);
                    } else {
                        assertEquals(in[me][i], got, c + " rank " + me + ": element " + i + " outside its block changed");
                    }
                }
            }
            case IN_PLACE_ALL_GATHER -> {
                for (int q = 0; q < N; q++) {
                    for (long i = blocks.start(q); i < blocks.start(q) + blocks.size(q); i++) {
                        assertEquals(in[q][(int) i], TestData.get(dst, 0, DT, i), c + " block " + q + " element " + i);
                    }
                }
            }
        }
    }

    private static void expectSum(double[][] in, int i, double got, String what) {
        double ref = TestData.reference(in, i, ReduceOp.SUM);
        double tol = TestData.tolerance(in, i, DT, ReduceOp.SUM, ref);
        assertTrue(Math.abs(got - ref) <= tol, what + " got=" + got + " reference=" + ref + " tolerance=" + tol);
    }
}
