package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.SplittableRandom;
import java.util.concurrent.locks.LockSupport;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * 10,000 back-to-back small all-reduces with random delays on random ranks: no hang, every result
 * exact. Values are small integers, so the float sums are exact and any lost or stale contribution
 * shows. The algorithm, path (staged / in place) and count change every iteration, identically on
 * every rank (shared seed), so consecutive collectives of different shapes interleave.
 */
class AllReduceStressTest {

    private static final int ITERATIONS = 10_000;

    @Test
    void tenThousandSmallAllReducesWithRandomDelays() {
        int worldSize = 4;
        InJvmWorld.runOnEveryRank(worldSize, GroupOptions.defaults().withTimeout(Duration.ofSeconds(30)), group -> {
            int rank = group.rank();
            Algorithm[] algorithms = {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING};
            SplittableRandom shared = new SplittableRandom(2024);      // same sequence on every rank
            SplittableRandom local = new SplittableRandom(7 + rank);   // this rank's delays
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, 64 * 4);
                 Arena arena = Arena.ofConfined()) {
                MemorySegment plain = arena.allocate(64 * 4, 64);
                for (int it = 0; it < ITERATIONS; it++) {
                    Algorithm algorithm = algorithms[shared.nextInt(algorithms.length)];
                    boolean inPlace = shared.nextBoolean();
                    int count = 1 + shared.nextInt(64);
                    int delayedRank = shared.nextInt(worldSize);
                    MemorySegment buf = inPlace ? mem.local() : plain;
                    for (int i = 0; i < count; i++) {
                        buf.setAtIndex(ValueLayout.JAVA_FLOAT, i, (it % 1000) + rank * 3 + i);
                    }
                    if (rank == delayedRank && local.nextInt(4) == 0) {
                        if (local.nextBoolean()) {
                            LockSupport.parkNanos(local.nextLong(1_000, 200_000));
                        } else {
                            Thread.yield();
                        }
                    }
                    if (inPlace) {
                        comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                    } else {
                        comm.allReduce(plain, count, DType.FLOAT32, ReduceOp.SUM, algorithm);
                    }
                    for (int i = 0; i < count; i++) {
                        float expected = worldSize * ((it % 1000) + i) + 3 * (0 + 1 + 2 + 3);
                        assertEquals(expected, buf.getAtIndex(ValueLayout.JAVA_FLOAT, i),
                                "iteration " + it + " " + algorithm + (inPlace ? " in-place" : " staged") + " element " + i);
                    }
                }
            }
            return null;
        });
    }
}
