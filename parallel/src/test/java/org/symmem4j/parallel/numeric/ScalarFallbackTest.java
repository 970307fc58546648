package org.symmem4j.parallel.numeric;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * A JVM started without {@code --add-modules=jdk.incubator.vector} runs every collective on the
 * scalar loops (the same bits) instead of failing with NoClassDefFoundError: checked in a child JVM
 * started without the flag.
 */
class ScalarFallbackTest {

    /** The child: all-reduces with every algorithm, prints the reducer's name and a checksum. */
    public static void main(String[] args) {
        List<Long> sums = InJvmWorld.runOnEveryRank(3, GroupOptions.defaults(), group -> {
            try (Communicator comm = Communicator.create(group)) {
                long checksum = 0;
                for (Algorithm a : new Algorithm[] {Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING}) {
                    MemorySegment buf = Arena.ofAuto().allocate(4L * 1000);
                    for (int i = 0; i < 1000; i++) {
                        buf.setAtIndex(ValueLayout.JAVA_FLOAT, i, i * (group.rank() + 1));
                    }
                    comm.allReduce(buf, 1000, DType.FLOAT32, ReduceOp.SUM, a);
                    for (int i = 0; i < 1000; i++) {
                        checksum += (long) buf.getAtIndex(ValueLayout.JAVA_FLOAT, i);
                    }
                }
                return checksum;
            }
        });
        System.out.println("REDUCER " + Reducer.forThisJvm().name());
        System.out.println("CHECKSUM " + sums.getFirst());
    }

    @Test
    void withoutTheVectorModuleCollectivesRunOnTheScalarLoops() throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process p = new ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED", "-cp",
                System.getProperty("java.class.path"), ScalarFallbackTest.class.getName())
                .redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertTrue(p.waitFor(120, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("REDUCER scalar"), out);
        // 3 ranks, sum of i * (1 + 2 + 3) over i < 1000, three algorithms
        assertTrue(out.contains("CHECKSUM " + 3L * 6 * (999L * 1000 / 2)), out);
    }
}
