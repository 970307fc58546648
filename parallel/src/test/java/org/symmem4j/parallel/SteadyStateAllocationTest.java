package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Collectives allocate nothing in steady state (after JIT warm-up): garbage on the hot path costs
 * latency at small sizes and GC pauses under training load. A regression (a string built for an
 * error message, a descriptor object per call, an enum values() clone) shows up as bytes per op.
 *
 * <p>The host reducer's vectors stay in registers only when C2 inlines every Vector API call; the
 * pom runs this class a second time with {@code -XX:-UseTypeProfile}, so that holds without the
 * type profiles C2 may or may not have (see {@code VectorReducer}'s exact receivers).
 */
class SteadyStateAllocationTest {

    private static final int WARMUP = 100_000;
    private static final int MEASURED = 50_000;
    private static final int ROUNDS = 20;

    @Test
    void smallCollectivesAllocateNothingPerOperation() {
        com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        var perRank = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)), group -> {
            StringBuilder report = new StringBuilder();
            try (Communicator comm = Communicator.create(group);
                 SymmetricMemory mem = SymmetricMemory.allocate(group, 4096);
                 Arena arena = Arena.ofConfined()) {
                MemorySegment plain = arena.allocate(4096);
                MemorySegment worst = arena.allocate(ValueLayout.JAVA_DOUBLE); // the ranks' worst best round
                Runnable[] ops = {
                    () -> comm.allReduce(mem, 0, 256, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT),
                    () -> comm.allReduce(mem, 0, 256, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT),
                    () -> comm.allReduce(mem, 0, 256, DType.BFLOAT16, ReduceOp.AVG, Algorithm.RING),
                    () -> comm.allReduce(plain, 256, DType.FLOAT64, ReduceOp.MAX, Algorithm.TWO_SHOT),
                    comm::barrier,
                };
                String[] names = {"one-shot in place", "two-shot in place", "ring bf16", "two-shot staged", "barrier"};
                for (int k = 0; k < ops.length; k++) {
                    for (int i = 0; i < WARMUP; i++) {
                        ops[k].run();
                    }
                    // The best of a few rounds: until C2 has compiled and inlined the whole path (later
                    // on a loaded 2-core machine, whose compiler threads wait for a core), the Vector
                    // API's vectors are real objects. An allocation the code makes per operation shows
                    // in every round; a JIT that has not finished shows in the first ones only.
                    // The ranks stop together, when every rank's best round is clean: a rank that stopped
                    // alone would start the next operation while its peer still ran this one, and the
                    // two would meet in different collectives (refused: a failure, not a measurement).
                    double perOp = Double.MAX_VALUE;
                    for (int round = 0; round < ROUNDS; round++) {
                        long before = threads.getCurrentThreadAllocatedBytes();
                        for (int i = 0; i < MEASURED; i++) {
                            ops[k].run();
                        }
                        perOp = Math.min(perOp, (threads.getCurrentThreadAllocatedBytes() - before) / (double) MEASURED);
                        worst.set(ValueLayout.JAVA_DOUBLE, 0, perOp);
                        comm.allReduce(worst, 1, DType.FLOAT64, ReduceOp.MAX, Algorithm.ONE_SHOT);
                        if (worst.get(ValueLayout.JAVA_DOUBLE, 0) < 1.0) {
                            break;
                        }
                    }
                    if (perOp >= 1.0) {
                        report.append(names[k]).append(": ").append(perOp).append(" bytes/op; ");
                    }
                }
            }
            return report.toString();
        });
        for (String r : perRank) {
            assertTrue(r.isEmpty(), "steady-state allocation: " + r);
        }
    }
}
