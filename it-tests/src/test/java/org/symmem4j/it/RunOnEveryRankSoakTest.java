package org.symmem4j.it;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The join soak (not part of CI: tagged {@code soak}): {@code soak.calls} (default 10^6) calls of
 * {@link InJvmWorld#runOnEveryRank} whose ranks return at once, spread over {@code soak.callers}
 * caller threads (default: the CPUs / 2), each call's ranks checked for their results. Counts every
 * call that failed — a false hang report is one — and writes a markdown report ({@code soak.out},
 * default target/run-on-every-rank-soak.md) with the calls per world size and every failure's message.
 * CI runs the short version ({@code parallel}'s RunOnEveryRankStressTest).
 */
@Tag("soak")
class RunOnEveryRankSoakTest {

    @Test
    void millionCallsNoFalseFailure() throws Exception {
        long calls = Long.getLong("soak.calls", 1_000_000);
        int callers = Integer.getInteger("soak.callers", Math.max(1, Runtime.getRuntime().availableProcessors() / 2));
        Path out = Path.of(System.getProperty("soak.out", "target/run-on-every-rank-soak.md"));
        AtomicLong next = new AtomicLong();
        AtomicLong[] byWorld = {new AtomicLong(), new AtomicLong(), new AtomicLong()};
        List<String> failures = java.util.Collections.synchronizedList(new ArrayList<>());
        long start = System.nanoTime();
        List<Thread> threads = new ArrayList<>();
        for (int c = 0; c < callers; c++) {
            threads.add(Thread.ofPlatform().name("soak-caller-" + c).start(() -> {
                for (long call = next.getAndIncrement(); call < calls; call = next.getAndIncrement()) {
                    int world = 2 << (int) (call % 3);  // 2, 4, 8 ranks in turn
                    long expected = call;
                    try {
                        List<Long> results = InJvmWorld.runOnEveryRank(world, GroupOptions.defaults(),
                                group -> expected * 16 + group.rank());
                        for (int r = 0; r < world; r++) {
                            if (results.get(r) != expected * 16 + r) {
                                failures.add("call " + call + ": rank " + r + " returned " + results.get(r));
                            }
                        }
                    } catch (RuntimeException e) {
                        failures.add("call " + call + " (" + world + " ranks): " + e);
                    }
                    byWorld[(int) (call % 3)].incrementAndGet();
                }
            }));
        }
        for (Thread t : threads) {
            t.join();
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        StringBuilder b = new StringBuilder("# runOnEveryRank soak\n\n");
        b.append("Date ").append(LocalDate.now()).append("; machine ").append(Runtime.getRuntime().availableProcessors())
                .append(" CPUs; Java ").append(Runtime.version()).append("; ").append(callers).append(" caller threads; ")
                .append(String.format(java.util.Locale.ROOT, "%.1f s", seconds)).append(".\n\n");
        b.append("| calls | 2 ranks | 4 ranks | 8 ranks | failed calls |\n|---:|---:|---:|---:|---:|\n");
        b.append("| ").append(calls).append(" | ").append(byWorld[0]).append(" | ").append(byWorld[1]).append(" | ")
                .append(byWorld[2]).append(" | ").append(failures.size()).append(" |\n\n");
        if (!failures.isEmpty()) {
            b.append("Failures:\n\n```\n");
            failures.stream().limit(200).forEach(f -> b.append(f).append('\n'));
            b.append("```\n");
        }
        Files.createDirectories(out.toAbsolutePath().getParent());
        Files.writeString(out, b.toString());
        assertEquals(List.of(), failures, "failed runOnEveryRank calls; see " + out);
    }
}
