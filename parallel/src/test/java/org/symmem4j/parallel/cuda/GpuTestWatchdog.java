package org.symmem4j.parallel.cuda;

import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * The GPU tests' hang guard: names the test that hung. A kernel waiting for a peer that never comes
 * spins on the GPU for good, and the threads synchronizing with its stream block in the driver, where
 * no interrupt or timeout reaches them; every later test would queue behind it. So each test gets a
 * deadline ({@code -Dsymmem4j.test.gpuTestSeconds}, default 240 s; the tests' own group timeouts are
 * 60–120 s); past it this prints {@code GPU TEST HUNG: test=<class>.<method> [<display name>]} with the
 * time it ran and every thread's stack (rank threads first) to stdout and stderr, then halts the JVM
 * with exit code {@link #EXIT_CODE}. Register with {@code @ExtendWith(GpuTestWatchdog.class)}.
 */
public final class GpuTestWatchdog implements BeforeEachCallback, AfterEachCallback {

    /** The JVM's exit code after a hung GPU test. */
    public static final int EXIT_CODE = 86;

    static final Duration LIMIT = Duration.ofSeconds(Long.getLong("symmem4j.test.gpuTestSeconds", 240));

    private static final ScheduledExecutorService TIMER = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "symmem4j-gpu-test-watchdog");
        t.setDaemon(true);
        return t;
    });
    private static final ExtensionContext.Namespace NAMESPACE = ExtensionContext.Namespace.create(GpuTestWatchdog.class);

    @Override
    public void beforeEach(ExtensionContext context) {
        String test = context.getRequiredTestClass().getSimpleName() + "." + context.getRequiredTestMethod().getName()
                + " [" + context.getDisplayName() + "]";
        long start = System.nanoTime();
        ScheduledFuture<?> deadline = TIMER.schedule(() -> hung(test, start), LIMIT.toMillis(), TimeUnit.MILLISECONDS);
        context.getStore(NAMESPACE).put("deadline", deadline);
    }

    @Override
    public void afterEach(ExtensionContext context) {
        ScheduledFuture<?> deadline = context.getStore(NAMESPACE).remove("deadline", ScheduledFuture.class);
        if (deadline != null) {
            deadline.cancel(false);
        }
    }

    private static void hung(String test, long startNanos) {
        long seconds = (System.nanoTime() - startNanos) / 1_000_000_000L;
        StringBuilder report = new StringBuilder();
        report.append("\nGPU TEST HUNG: test=").append(test).append(" running=").append(seconds).append("s limit=")
                .append(LIMIT.toSeconds()).append("s (-Dsymmem4j.test.gpuTestSeconds); device-side waits cannot be"
                        + " interrupted, so the JVM halts now with exit code ").append(EXIT_CODE).append(". Threads:\n");
        List<Map.Entry<Thread, StackTraceElement[]>> threads = new ArrayList<>(Thread.getAllStackTraces().entrySet());
        threads.sort(Comparator.comparing((Map.Entry<Thread, StackTraceElement[]> e) -> !e.getKey().getName().startsWith("symmem4j-rank-"))
                .thenComparing(e -> e.getKey().getName()));
        for (Map.Entry<Thread, StackTraceElement[]> e : threads) {
            report.append("\"").append(e.getKey().getName()).append("\" ").append(e.getKey().getState()).append('\n');
            for (StackTraceElement f : e.getValue()) {
                report.append("    at ").append(f).append('\n');
            }
        }
        report.append("GPU TEST HUNG: test=").append(test).append(" (repeated after the stacks)\n");
        for (PrintStream out : new PrintStream[] {System.err, System.out}) {
            out.print(report);
            out.flush();
        }
        Runtime.getRuntime().halt(EXIT_CODE);
    }
}
