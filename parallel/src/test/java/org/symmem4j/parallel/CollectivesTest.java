package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.symmem4j.parallel.group.InJvmWorld;

/** Reduce-scatter, all-gather and broadcast against float64 references, with single and many staged pieces. */
class CollectivesTest {

    static Stream<Arguments> cases() {
        Stream.Builder<Arguments> b = Stream.builder();
        for (int n : new int[] {1, 2, 3, 4, 8}) {
            for (long staging : new long[] {4096, CommunicatorOptions.DEFAULT_STAGING_BYTES}) {
                b.add(Arguments.of(n, staging));
            }
        }
        return b.build();
    }

    private static final int[] COUNTS = {0, 1, 1001, 65_541};

    @ParameterizedTest(name = "worldSize={0} stagingBytes={1}")
    @MethodSource("cases")
    void reduceScatterAllGatherBroadcast(int worldSize, long stagingBytes) {
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
        // every rank checks against every rank's input: made once per seed and shared (read only), not once per rank
        Map<Long, double[]> inputs = new ConcurrentHashMap<>();
        InJvmWorld.runOnEveryRank(worldSize, options, group -> {
            int rank = group.rank();
            try (Communicator comm = Communicator.create(group, new CommunicatorOptions(stagingBytes, 1024));
                 Arena arena = Arena.ofConfined()) {
                int caseId = 0;
                for (DType dtype : DType.values()) {
                    for (int count : COUNTS) {
                        caseId++;
                        // reduce-scatter: rank r's send block b = data(seed(case, r), b)
                        double[][] send = new double[worldSize][];
                        for (int r = 0; r < worldSize; r++) {
                            send[r] = inputs.computeIfAbsent(caseId * 100L + r, seed -> TestData.random(seed,
                                    count * worldSize, dtype));
                        }
                        MemorySegment sendSeg = arena.allocate(Math.max(1, dtype.bytes((long) count * worldSize)), 64);
                        MemorySegment recvSeg = arena.allocate(Math.max(1, dtype.bytes(count)), 64);
                        TestData.write(sendSeg, 0, dtype, send[rank]);
                        for (ReduceOp op : ReduceOp.values()) {
                            comm.reduceScatter(sendSeg, recvSeg, count, dtype, op);
                            for (int i = 0; i < count; i++) {
                                double[][] column = new double[worldSize][1];
                                for (int r = 0; r < worldSize; r++) {
                                    column[r][0] = send[r][rank * count + i];
                                }
                                double exact = TestData.rankOrderResult(column, 0, dtype, op);
                                double got = TestData.get(recvSeg, 0, dtype, i);
                                if (Double.compare(exact, got) != 0) {
                                    fail("reduce-scatter " + dtype + " " + op + " count=" + count + " rank=" + rank
                                            + " element " + i + " got=" + got + " expected=" + exact);
                                }
                            }
                        }
                        // all-gather: block q of recv = rank q's send
                        double[][] mine = new double[worldSize][];
                        for (int r = 0; r < worldSize; r++) {
                            mine[r] = inputs.computeIfAbsent(caseId * 100L + 50 + r, seed -> TestData.random(seed, count,
                                    dtype));
                        }
                        MemorySegment agSend = arena.allocate(Math.max(1, dtype.bytes(count)), 64);
                        MemorySegment agRecv = arena.allocate(Math.max(1, dtype.bytes((long) count * worldSize)), 64);
                        TestData.write(agSend, 0, dtype, mine[rank]);
                        comm.allGather(agSend, agRecv, count, dtype);
                        for (int q = 0; q < worldSize; q++) {
                            for (int i = 0; i < count; i++) {
                                int block = q;
                                int element = i; // the message is built only on a failure (not once per element)
                                assertEquals(mine[q][i], TestData.get(agRecv, 0, dtype, (long) q * count + i),
                                        () -> "all-gather " + dtype + " count=" + count + " block " + block + " element "
                                                + element);
                            }
                        }
                        // broadcast from every root in turn
                        for (int root = 0; root < worldSize; root++) {
                            double[] rootData = inputs.computeIfAbsent(caseId * 100L + 90 + root,
                                    seed -> TestData.random(seed, count, dtype));
                            MemorySegment buf = arena.allocate(Math.max(1, dtype.bytes(count)), 64);
                            TestData.write(buf, 0, dtype, rank == root ? rootData : TestData.random(rank + 7L, count, dtype));
                            comm.broadcast(buf, count, dtype, root);
                            for (int i = 0; i < count; i++) {
                                int from = root;
                                int element = i;
                                assertEquals(rootData[i], TestData.get(buf, 0, dtype, i),
                                        () -> "broadcast " + dtype + " root=" + from + " count=" + count + " element "
                                                + element);
                            }
                        }
                    }
                }
            }
            return null;
        });
    }
}
