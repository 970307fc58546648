package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.numeric.Reducer;

/**
 * A world of threads closed while its ranks' threads still use their symmetric memory must never
 * free that memory under them. Trainers read their own part of a symmetric memory through segments
 * without a lifetime check (ND4J's gradient view placed in the memory, and
 * {@code ModelReplica.segmentOf} over it, reinterpreted to the global scope): when
 * {@link InJvmWorld#close()} unmapped a rank's memory while its worker thread ran
 * {@link Reducer#firstNonFinite} over such a view, the JVM died with SIGSEGV (seen in a tensor-parallel
 * restart test, after a peer's all-reduce failed with "buffer memory is freed"). Now the world's close
 * aborts every group that still holds open memory, naming why, and leaves the memory mapped until its
 * rank closes it (or drops it): reads go on seeing the data, and the next collective fails with a
 * Java exception that says what happened.
 *
 * <p>The dangerous part runs in a child JVM: a crash there is an exit code, not a dead test fork.
 */
class ClosedWorldMemorySafetyTest {

    private static final long COUNT = 1 << 18; // 1 MiB of float32: each check reads every page
    private static final int READS_AFTER_CLOSE = 200;

    /** The child: two ranks read their memory through unchecked views while the main thread closes the world. */
    public static void main(String[] args) throws Exception {
        int n = 2;
        InJvmWorld world = InJvmWorld.create(n, GroupOptions.defaults().withTimeout(Duration.ofSeconds(20)));
        CountDownLatch reading = new CountDownLatch(n);
        AtomicBoolean worldClosed = new AtomicBoolean();
        AtomicReferenceArray<String> outcome = new AtomicReferenceArray<>(n);
        List<Thread> threads = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            threads.add(Thread.ofPlatform().name("worker-" + r).start(() -> {
                Group group = world.join(rank);
                SymmetricMemory memory = SymmetricMemory.allocate(group, COUNT * Float.BYTES);
                Communicator comm = Communicator.create(group);
                // what a trainer holds over its part of the memory: an ND4J array placed there, read
                // through a segment of the global scope (no lifetime check, as ModelReplica.segmentOf makes it)
                MemorySegment view = MemorySegment.ofAddress(memory.local().address()).reinterpret(COUNT * Float.BYTES);
                for (long i = 0; i < COUNT; i++) {
                    view.setAtIndex(ValueLayout.JAVA_FLOAT, i, 1f);
                }
                Reducer reducer = Reducer.forThisJvm();
                reading.countDown();
                long wrong = 0;
                int after = 0;
                while (after < READS_AFTER_CLOSE) {
                    if (reducer.firstNonFinite(view, 0, DType.FLOAT32, COUNT) != -1 || view.getAtIndex(
                            ValueLayout.JAVA_FLOAT, COUNT - 1) != 1f) {
                        wrong++;
                    }
                    if (worldClosed.get()) {
                        after++;
                    }
                }
                String next;
                try {
                    comm.allReduce(memory, 0, COUNT, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                    next = "completed";
                } catch (RuntimeException e) {
                    next = e.getClass().getSimpleName() + ": " + e.getMessage();
                }
                memory.close(); // the rank's own close frees its part: nothing of it is read afterwards
                comm.close();
                group.close();
                outcome.set(rank, "wrong=" + wrong + " next=" + next);
            }));
        }
        reading.await();
        world.close(); // as a trainer's creator does when a failed run ends, while worker threads still finish
        worldClosed.set(true);
        for (Thread t : threads) {
            t.join();
        }
        for (int r = 0; r < n; r++) {
            System.out.println("RANK " + r + " " + outcome.get(r));
        }
    }

    @Test
    void closingTheWorldUnderRunningRanksNeverFreesTheirMemoryAndTheirNextCollectiveSaysWhy(@TempDir Path dir)
            throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process p = new ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector",
                "-XX:ErrorFile=" + dir.resolve("hs_err_%p.log"), "-XX:-CreateCoredumpOnCrash", "-cp",
                System.getProperty("java.class.path"), ClosedWorldMemorySafetyTest.class.getName())
                .redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), out);
        try (var files = Files.list(dir)) {
            assertFalse(files.findAny().isPresent(), "the child JVM crashed: " + out);
        }
        assertFalse(out.contains("SIGSEGV") || out.contains("A fatal error"), out);
        assertEquals(0, p.exitValue(), out);
        for (int r = 0; r < 2; r++) {
            String line = out.lines().filter(l -> l.startsWith("RANK ")).skip(r).findFirst().orElse("(none)");
            // the memory stayed mapped and held the rank's data while it still read it
            assertTrue(line.startsWith("RANK " + r + " wrong=0 "), out);
            // the collective after the close fails, naming what happened and the fix
            assertTrue(line.contains("next=PeerTimeoutException") || line.contains("next=SymmemException"), out);
            assertTrue(line.contains("the world was closed"), out);
            assertTrue(line.contains("fix:"), out);
        }
    }
}
