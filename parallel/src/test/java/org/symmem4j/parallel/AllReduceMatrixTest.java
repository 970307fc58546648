package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Every algorithm × dtype × op × world size 1, 2, 3, 4, 8 × sizes 0, 1, odd, unaligned, 1 MB, on
 * both paths (staged plain buffer; in place on symmetric memory), against a float64 reference, with
 * bitwise equality across ranks and, for ONE_SHOT/TWO_SHOT, bitwise equality with the rank-order
 * float result.
 */
class AllReduceMatrixTest {

    /** A size case: element count and the byte offset of element 0 within the buffer. */
    record Size(String name, int count, long byteOffset) {
    }

    static List<Size> sizes(DType dtype, boolean large) {
        return List.of(new Size("zero", 0, 0), new Size("one", 1, 0), new Size("odd", 1001, 0),
                new Size("unaligned", 4099, 3), large ? new Size("1MB", (1 << 20) / dtype.byteSize(), 0)
                        : new Size("64KB+odd", (1 << 16) / dtype.byteSize() + 5, 2));
    }

    static Stream<Arguments> worldsAndAlgorithms() {
        List<Arguments> out = new ArrayList<>();
        for (int n : new int[] {1, 2, 3, 4, 8}) {
            for (Algorithm a : new Algorithm[] {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING}) {
                out.add(Arguments.of(n, a));
            }
        }
        return out.stream();
    }

    @ParameterizedTest(name = "worldSize={0} {1}")
    @MethodSource("worldsAndAlgorithms")
    void allReduceMatchesReference(int worldSize, Algorithm algorithm) {
        runMatrix(worldSize, algorithm, CommunicatorOptions.defaults(), true);
    }

    /** Tiny staging and ring segments: many staged pieces and ring rounds per call (up to 64 KB, not 1 MB, to stay quick). */
    @ParameterizedTest(name = "small scratch worldSize={0} {1}")
    @MethodSource("worldsAndAlgorithms")
    void allReduceMatchesReferenceWithManyPieces(int worldSize, Algorithm algorithm) {
        runMatrix(worldSize, algorithm, new CommunicatorOptions(4096, 512), false);
    }

    private static void runMatrix(int worldSize, Algorithm algorithm, CommunicatorOptions options, boolean large) {
        GroupOptions groupOptions = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
        // results[case][rank] = output bytes of that rank
        List<List<byte[]>> perRank = InJvmWorld.runOnEveryRank(worldSize, groupOptions, group -> {
            List<byte[]> outputs = new ArrayList<>();
            long maxBytes = (1 << 20) + 64;
            try (Communicator comm = Communicator.create(group, options);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, maxBytes);
                 Arena arena = Arena.ofConfined()) {
                MemorySegment plain = arena.allocate(maxBytes, 64);
                int caseId = 0;
                for (DType dtype : DType.values()) {
                    for (ReduceOp op : ReduceOp.values()) {
                        for (Size size : sizes(dtype, large)) {
                            for (boolean inPlace : new boolean[] {false, true}) {
                                long seed = caseId * 1000L + group.rank();
                                double[] in = TestData.random(seed, size.count(), dtype);
                                MemorySegment target = inPlace ? mem.local() : plain;
                                TestData.write(target, size.byteOffset(), dtype, in);
                                if (inPlace) {
                                    comm.allReduce(mem, size.byteOffset(), size.count(), dtype, op, algorithm);
                                } else {
                                    comm.allReduce(plain.asSlice(size.byteOffset()), size.count(), dtype, op, algorithm);
                                }
                                byte[] out = target.asSlice(size.byteOffset(), dtype.bytes(size.count()))
                                        .toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
                                outputs.add(out);
                                caseId++;
                            }
                        }
                    }
                }
            }
            return outputs;
        });

        int caseId = 0;
        for (DType dtype : DType.values()) {
            for (ReduceOp op : ReduceOp.values()) {
                for (Size size : sizes(dtype, large)) {
                    for (boolean inPlace : new boolean[] {false, true}) {
                        String label = algorithm + " " + dtype + " " + op + " " + size.name() + (inPlace ? " in-place" : " staged")
                                + " worldSize=" + worldSize;
                        double[][] inputs = new double[worldSize][];
                        for (int r = 0; r < worldSize; r++) {
                            inputs[r] = TestData.random(caseId * 1000L + r, size.count(), dtype);
                        }
                        byte[] rank0 = perRank.get(0).get(caseId);
                        for (int r = 1; r < worldSize; r++) {
                            assertArrayEquals(rank0, perRank.get(r).get(caseId), label + ": rank " + r + " differs from rank 0");
                        }
                        MemorySegment got = MemorySegment.ofArray(rank0);
                        for (int i = 0; i < size.count(); i++) {
                            double g = TestData.get(got, 0, dtype, i);
                            double ref = TestData.reference(inputs, i, op);
                            double tol = TestData.tolerance(inputs, i, dtype, op, ref);
                            if (!(Math.abs(g - ref) <= tol)) {
                                fail(label + ": element " + i + " got=" + g + " reference=" + ref + " tolerance=" + tol);
                            }
                            if (algorithm != Algorithm.RING || worldSize <= 2) {
                                double exact = TestData.rankOrderResult(inputs, i, dtype, op);
                                if (Double.doubleToRawLongBits(exact) != Double.doubleToRawLongBits(g)) {
                                    assertEquals(exact, g, 0.0, label + ": element " + i + " not the rank-order result");
                                }
                            }
                        }
                        caseId++;
                    }
                }
            }
        }
    }
}
