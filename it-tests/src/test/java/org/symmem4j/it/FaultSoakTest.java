package org.symmem4j.it;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.host.SharedMemoryFiles;

/**
 * The long fault soak (not part of CI: tagged {@code soak}; run by {@code bench/fault-soak.sh}):
 * hundreds of SIGKILL trials on 3-rank groups, the victim and the moment chosen at random — during
 * set-up, mid-collective, rank 0 included. Per trial it records whether any survivor outlived the
 * timeout plus a margin (a hang), whether any all-reduce result was wrong (a corruption), whether
 * files were left in /dev/shm (residue), whether every survivor's error named the victim, and the
 * time from the kill until the last survivor ended. Writes a markdown report with every trial.
 *
 * <p>System properties: {@code soak.trials} (default 200), {@code soak.seed} (default 1),
 * {@code soak.out} (default target/fault-soak.md).
 */
@Tag("soak")
class FaultSoakTest {

    private static final long TIMEOUT_MS = 10_000;
    private static final long MARGIN_MS = 10_000;

    record Trial(int n, String phase, int victim, long delayMs, boolean hang, boolean corrupt, boolean residue,
                 boolean named, long killToLastErrorMs) {
    }

    @Test
    void soak() throws Exception {
        int trials = Integer.getInteger("soak.trials", 200);
        long seed = Long.getLong("soak.seed", 1);
        Path out = Path.of(System.getProperty("soak.out", "target/fault-soak.md"));
        SplittableRandom random = new SplittableRandom(seed);
        List<Trial> results = new ArrayList<>();
        for (int n = 0; n < trials; n++) {
            boolean setUp = random.nextInt(3) == 0;
            int victim = random.nextInt(3);
            long delayMs = setUp ? random.nextLong(0, 1500) : random.nextLong(0, 300);
            results.add(trial(n, setUp ? "set-up" : "mid-collective", victim, delayMs));
            if ((n + 1) % 10 == 0) {
                write(out, results, seed, trials);
            }
        }
        write(out, results, seed, trials);
        long bad = results.stream().filter(t -> t.hang() || t.corrupt() || t.residue() || !t.named()).count();
        assertEquals(0, bad, "trials with a hang, a corruption, residue or an unnamed culprit; see " + out);
    }

    private static Trial trial(int n, String phase, int victim, long delayMs) throws Exception {
        try (Workers w = Workers.start(3, "loop", TIMEOUT_MS)) {
            if (phase.equals("mid-collective")) {
                for (int r = 0; r < 3; r++) {
                    if (!w.awaitLog(r, "READY", 60_000)) {
                        throw new AssertionError("trial " + n + ": rank " + r + " never got going:\n" + w.log(r));
                    }
                }
            }
            Thread.sleep(delayMs);
            long killedAt = System.nanoTime();
            w.signal(victim, "KILL");
            long[] ends = w.awaitExitTimes(TIMEOUT_MS + MARGIN_MS + 10_000);
            boolean hang = false;
            long last = 0;
            boolean named = true;
            boolean corrupt = false;
            for (int r = 0; r < 3; r++) {
                corrupt |= w.log(r).contains("CORRUPT");
                if (r == victim) {
                    continue;
                }
                long ms = ends[r] == 0 ? Long.MAX_VALUE : (ends[r] - killedAt) / 1_000_000;
                hang |= ms > TIMEOUT_MS + MARGIN_MS;
                last = Math.max(last, ms);
                named &= FaultInjectionTest.namesRank(FaultInjectionTest.failure(w.log(r)), victim);
            }
            Thread.sleep(50);
            boolean residue = false;
            for (String name : SharedMemoryFiles.list()) {
                for (long pid : w.pids()) {
                    residue |= name.startsWith(SharedMemoryFiles.PREFIX + pid + "-");
                }
            }
            if (!named || hang || residue) {
                Files.createDirectories(Path.of("target", "soak-failures"));
                for (int r = 0; r < 3; r++) {
                    Files.writeString(Path.of("target", "soak-failures", "trial-" + n + "-rank-" + r + ".log"), w.log(r));
                }
            }
            return new Trial(n, phase, victim, delayMs, hang, corrupt, residue, named, last);
        }
    }

    private static void write(Path out, List<Trial> results, long seed, int planned) throws IOException {
        long[] times = results.stream().mapToLong(Trial::killToLastErrorMs).filter(t -> t != Long.MAX_VALUE).sorted().toArray();
        StringBuilder b = new StringBuilder();
        b.append("# Fault soak: SIGKILL trials on 3-rank process groups\n\n");
        b.append("Date ").append(LocalDate.now()).append("; machine ").append(Runtime.getRuntime().availableProcessors())
                .append(" CPUs; seed ").append(seed).append("; ").append(results.size()).append(" of ").append(planned)
                .append(" trials; timeout ").append(TIMEOUT_MS).append(" ms, hang bound timeout + ").append(MARGIN_MS).append(" ms.\n\n");
        b.append("| trials | hangs | corruptions | residue | culprit not named | kill to last survivor's end, median ms | max ms |\n");
        b.append("|---:|---:|---:|---:|---:|---:|---:|\n");
        b.append("| ").append(results.size()).append(" | ").append(results.stream().filter(Trial::hang).count())
                .append(" | ").append(results.stream().filter(Trial::corrupt).count())
                .append(" | ").append(results.stream().filter(Trial::residue).count())
                .append(" | ").append(results.stream().filter(t -> !t.named()).count())
                .append(" | ").append(times.length == 0 ? "-" : Long.toString(times[times.length / 2]))
                .append(" | ").append(times.length == 0 ? "-" : Long.toString(times[times.length - 1])).append(" |\n\n");
        for (String phase : new String[] {"set-up", "mid-collective"}) {
            long[] t = results.stream().filter(r -> r.phase().equals(phase)).mapToLong(Trial::killToLastErrorMs).sorted().toArray();
            if (t.length > 0) {
                b.append("- ").append(phase).append(": ").append(t.length).append(" trials, median ").append(t[t.length / 2])
                        .append(" ms, max ").append(t[t.length - 1]).append(" ms\n");
            }
        }
        b.append("\nRaw trials (n, phase, victim, delay ms, hang, corrupt, residue, named, kill-to-last-end ms):\n\n```\n");
        for (Trial t : results) {
            b.append(t.n()).append(',').append(t.phase()).append(',').append(t.victim()).append(',').append(t.delayMs())
                    .append(',').append(t.hang()).append(',').append(t.corrupt()).append(',').append(t.residue())
                    .append(',').append(t.named()).append(',').append(t.killToLastErrorMs()).append('\n');
        }
        b.append("```\n");
        Files.createDirectories(out.toAbsolutePath().getParent());
        Files.writeString(out, b.toString());
    }
}
