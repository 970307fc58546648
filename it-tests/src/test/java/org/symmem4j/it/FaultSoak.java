package org.symmem4j.it;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.symmem4j.parallel.host.SharedMemoryFiles;

/**
 * The fault soak, runnable without Maven: SIGKILL and SIGSTOP trials on 3- and 4-rank process groups,
 * the victim and the moment chosen at random. Per trial it records whether every survivor blamed the
 * victim and nobody else (its error's {@code PeerTimeoutException.missingRanks()}, printed by
 * {@link ProcessWorker} as {@code BLAME [...]}), whether any survivor outlived the timeout plus a margin
 * (a hang), whether any all-reduce result was wrong (a corruption), whether files of the trial's
 * processes were left in /dev/shm (residue), and the time from the fault until the last survivor ended.
 * Writes a markdown report with every trial.
 *
 * <ul>
 *   <li>kill trials: 3 ranks; during set-up (a third: half while joining, 0-1000 ms after every rank
 *       started, half while the memories are set up, 0-400 ms after the group formed; and in half of those
 *       another survivor is descheduled with SIGSTOP for 1.5 s around the kill, so it reaches the store or
 *       a peer's file only after the first survivor gave up) or mid-collective (after 200 all-reduces,
 *       0-300 ms later); any rank, rank 0 included.</li>
 *   <li>stop trials: 3 or 4 ranks running one algorithm (RING in half the trials, else ONE_SHOT or
 *       TWO_SHOT); a rank other than 0 or rank 0 is stopped after 200 all-reduces, 0-300 ms later; the
 *       survivors must end within the timeout blaming it; then it is continued and must end too.</li>
 * </ul>
 *
 * <p>Usage (no JUnit needed; the class path needs it-tests' test classes, parallel's and pipeline's classes,
 * pipeline's test classes, slf4j-api and micrometer-core with its dependencies):
 * {@code java --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -cp <that> org.symmem4j.it.FaultSoak
 * kill=200 stop=200 seed=1 parallel=4 out=fault-soak.md} (every argument optional; defaults 200, 200,
 * 1, 1, target/fault-soak.md; {@code killPhase=set-up|mid-collective} and {@code stopAlgorithm=RING|ONE_SHOT|TWO_SHOT}
 * narrow the trials). Run it from a directory where {@code target/worker-logs} may be written.
 * Exit code 0 when every trial passed, 1 otherwise.
 */
public final class FaultSoak {

    static final long TIMEOUT_MS = 10_000;
    static final long MARGIN_MS = 10_000;
    private static final Pattern BLAME = Pattern.compile("(?m)^BLAME \\[([0-9, ]*)]$");

    /** "any", "set-up" or "mid-collective": where kill trials strike. */
    static String killPhase = "any";
    /** "any" or an algorithm: what stop trials run. */
    static String stopAlgorithm = "any";

    private FaultSoak() {
    }

    /** One trial's outcome. {@code blamed}: per survivor, the ranks its error blamed ("-" for none). */
    record Trial(int n, String kind, int ranks, int victim, String detail, long delayMs, boolean hang, boolean corrupt,
                 boolean residue, boolean named, String blamed, long faultToLastEndMs) {

        boolean failed() {
            return hang || corrupt || residue || !named;
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String arg : args) {
            String[] kv = arg.split("=", 2);
            if (kv.length != 2) {
                throw new IllegalArgumentException("arguments are key=value (kill, stop, seed, parallel, out); got " + arg);
            }
            a.put(kv[0], kv[1]);
        }
        killPhase = a.getOrDefault("killPhase", "any");
        stopAlgorithm = a.getOrDefault("stopAlgorithm", "any");
        List<Trial> results = run(Integer.parseInt(a.getOrDefault("kill", "200")), Integer.parseInt(a.getOrDefault("stop",
                "200")), Long.parseLong(a.getOrDefault("seed", "1")), Integer.parseInt(a.getOrDefault("parallel", "1")),
                Path.of(a.getOrDefault("out", "target/fault-soak.md")));
        long bad = results.stream().filter(Trial::failed).count();
        System.out.println(bad + " of " + results.size() + " trials failed");
        System.exit(bad == 0 ? 0 : 1);
    }

    /** Runs the trials ({@code parallel} at a time) and writes the report to {@code out} as they finish. */
    static List<Trial> run(int killTrials, int stopTrials, long seed, int parallel, Path out) throws Exception {
        SplittableRandom random = new SplittableRandom(seed);
        List<java.util.concurrent.Callable<Trial>> plan = new ArrayList<>();
        for (int i = 0; i < killTrials + stopTrials; i++) {
            int n = i;
            SplittableRandom r = random.split();
            plan.add(i < killTrials ? () -> killTrial(n, r) : () -> stopTrial(n, r));
        }
        List<Trial> results = Collections.synchronizedList(new ArrayList<>());
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, parallel));
        try {
            List<Future<Trial>> futures = new ArrayList<>();
            for (var task : plan) {
                futures.add(pool.submit(() -> {
                    Trial t = task.call();
                    results.add(t);
                    System.out.println("trial " + t);
                    synchronized (FaultSoak.class) {
                        write(out, results, seed, plan.size(), parallel);
                    }
                    return t;
                }));
            }
            for (Future<Trial> f : futures) {
                f.get();
            }
        } finally {
            pool.shutdownNow();
        }
        write(out, results, seed, plan.size(), parallel);
        return results;
    }

    private static Trial killTrial(int n, SplittableRandom random) throws Exception {
        boolean setUp = killPhase.equals("any") ? random.nextInt(3) == 0 : killPhase.equals("set-up");
        int victim = random.nextInt(3);
        boolean pause = setUp && random.nextBoolean();
        int paused = pause ? (victim == 1 ? 2 : 1) : -1; // a survivor other than rank 0, which hosts the store
        boolean joining = setUp && random.nextBoolean();
        long delayMs = joining ? random.nextLong(0, 1000) : setUp ? random.nextLong(0, 400) : random.nextLong(0, 300);
        String phase = joining ? "joining" : setUp ? "allocating" : "mid-collective";
        try (Workers w = Workers.start(3, "loop", TIMEOUT_MS)) {
            for (int r = 0; r < 3; r++) {
                if (!w.awaitLog(r, joining ? "START" : setUp ? "JOINED" : "READY", 60_000)) {
                    throw new AssertionError("trial " + n + ": rank " + r + " never got going:\n" + w.log(r));
                }
            }
            Thread.sleep(delayMs);
            long killedAt = System.nanoTime();
            if (paused >= 0) {
                w.signal(paused, "STOP");
            }
            w.signal(victim, "KILL");
            if (paused >= 0) {
                Thread.sleep(1500);
                w.signal(paused, "CONT");
            }
            long[] ends = w.awaitExitTimes(TIMEOUT_MS + MARGIN_MS + 10_000);
            return outcome(n, "kill", w, 3, victim, phase + (paused >= 0 ? ", rank "
                    + paused + " paused 1.5 s" : ""), delayMs, killedAt, ends);
        }
    }

    private static Trial stopTrial(int n, SplittableRandom random) throws Exception {
        int ranks = 3 + random.nextInt(2);
        int victim = random.nextInt(ranks);
        String algorithm = random.nextBoolean() ? "RING" : random.nextBoolean() ? "ONE_SHOT" : "TWO_SHOT";
        algorithm = stopAlgorithm.equals("any") ? algorithm : stopAlgorithm;
        long delayMs = random.nextLong(0, 300);
        try (Workers w = Workers.start(Workers.Launch.of(ranks, "loop", TIMEOUT_MS).withEnv(ProcessWorker.ALGORITHM_ENV,
                algorithm))) {
            for (int r = 0; r < ranks; r++) {
                if (!w.awaitLog(r, "READY", 60_000)) {
                    throw new AssertionError("trial " + n + ": rank " + r + " never got going:\n" + w.log(r));
                }
            }
            Thread.sleep(delayMs);
            long stoppedAt = System.nanoTime();
            w.signal(victim, "STOP");
            long[] ends = new long[ranks];
            long deadline = System.nanoTime() + (TIMEOUT_MS + MARGIN_MS + 10_000) * 1_000_000;
            while (System.nanoTime() < deadline && !survivorsEnded(w, ends, victim)) {
                Thread.sleep(5);
            }
            w.signal(victim, "CONT");
            long[] victimEnd = w.awaitExitTimes(TIMEOUT_MS + MARGIN_MS);
            ends[victim] = victimEnd[victim];
            Trial t = outcome(n, "stop", w, ranks, victim, algorithm, delayMs, stoppedAt, ends);
            if (victimEnd[victim] == 0) { // the continued rank must end as well
                return new Trial(t.n(), t.kind(), t.ranks(), t.victim(), t.detail() + ", victim never ended", t.delayMs(),
                        true, t.corrupt(), t.residue(), t.named(), t.blamed(), t.faultToLastEndMs());
            }
            return t;
        }
    }

    private static boolean survivorsEnded(Workers w, long[] ends, int victim) {
        boolean all = true;
        for (int r = 0; r < ends.length; r++) {
            if (r != victim && ends[r] == 0) {
                if (w.isAlive(r)) {
                    all = false;
                } else {
                    ends[r] = System.nanoTime();
                }
            }
        }
        return all;
    }

    private static Trial outcome(int n, String kind, Workers w, int ranks, int victim, String detail, long delayMs,
                                 long faultAt, long[] ends) throws Exception {
        boolean hang = false;
        boolean named = true;
        boolean corrupt = false;
        long last = 0;
        List<String> blamed = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            String log = w.log(r);
            corrupt |= log.contains("CORRUPT");
            if (r == victim) {
                continue;
            }
            long ms = ends[r] == 0 ? Long.MAX_VALUE : (ends[r] - faultAt) / 1_000_000;
            hang |= ms > TIMEOUT_MS + MARGIN_MS;
            last = Math.max(last, ms);
            List<Integer> blame = blame(log);
            blamed.add(r + ":" + (blame == null ? "-" : blame.toString().replace(" ", "")));
            named &= blamed(log, victim);
        }
        Thread.sleep(50);
        w.close(); // every rank gone (a hung one killed) before residue is judged
        w.awaitExit(10_000);
        boolean residue = false;
        for (String name : SharedMemoryFiles.list()) {
            for (long pid : w.pids()) {
                residue |= name.startsWith(SharedMemoryFiles.PREFIX + pid + "-");
            }
        }
        Trial t = new Trial(n, kind, ranks, victim, detail, delayMs, hang, corrupt, residue, named, String.join(" ", blamed),
                last);
        if (t.failed()) {
            Path dir = Files.createDirectories(Path.of("target", "soak-failures"));
            for (int r = 0; r < ranks; r++) {
                Files.writeString(dir.resolve("trial-" + n + "-rank-" + r + ".log"), w.log(r));
            }
        }
        return t;
    }

    /** The ranks a worker's error blamed ({@code BLAME [...]}), or null when it printed none. */
    static List<Integer> blame(String log) {
        Matcher m = BLAME.matcher(log);
        if (!m.find()) {
            return null;
        }
        List<Integer> ranks = new ArrayList<>();
        for (String s : m.group(1).split(",")) {
            if (!s.isBlank()) {
                ranks.add(Integer.parseInt(s.trim()));
            }
        }
        return ranks;
    }

    /**
     * Whether a survivor's failure blames exactly {@code victim}: its error's blamed ranks are [victim]; or,
     * where its error carries none (rank 0's store gone before this rank joined), its message names the victim.
     */
    static boolean blamed(String log, int victim) {
        if (!log.contains("FAILED ")) {
            return false;
        }
        List<Integer> blame = blame(log);
        return blame != null ? blame.equals(List.of(victim)) : namesRank(failure(log), victim);
    }

    /** The failure line of a rank's log and everything after it. */
    static String failure(String log) {
        int i = log.indexOf("FAILED ");
        return i < 0 ? "" : log.substring(i);
    }

    /** Whether {@code text} names rank {@code r}: "rank 1 (pid ...)", "rank=1", "ranks [0, 1]", ... */
    static boolean namesRank(String text, int r) {
        return Pattern.compile("rank[ =]" + r + "\\b|ranks \\[[0-9, ]*\\b" + r + "\\b").matcher(text).find();
    }

    private static void write(Path out, List<Trial> all, long seed, int planned, int parallel) throws IOException {
        List<Trial> results;
        synchronized (all) {
            results = new ArrayList<>(all);
        }
        results.sort(java.util.Comparator.comparingInt(Trial::n));
        StringBuilder b = new StringBuilder();
        b.append("# Fault soak: SIGKILL and SIGSTOP trials on 3- and 4-rank process groups\n\n");
        b.append("Date ").append(LocalDate.now()).append("; machine ").append(Runtime.getRuntime().availableProcessors())
                .append(" CPUs; seed ").append(seed).append("; ").append(results.size()).append(" of ").append(planned)
                .append(" trials, ").append(parallel).append(" at a time; timeout ").append(TIMEOUT_MS)
                .append(" ms, hang bound timeout + ").append(MARGIN_MS).append(" ms.\n\n");
        b.append("| kind | trials | failed rank blamed by every survivor (and no other) | hangs | corruptions | residue |"
                + " fault to last survivor's end, median ms | p90 ms | max ms |\n");
        b.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (String kind : new String[] {"kill", "stop"}) {
            List<Trial> k = results.stream().filter(t -> t.kind().equals(kind)).toList();
            if (k.isEmpty()) {
                continue;
            }
            long[] times = k.stream().mapToLong(Trial::faultToLastEndMs).filter(t -> t != Long.MAX_VALUE).sorted().toArray();
            b.append("| ").append(kind).append(" | ").append(k.size())
                    .append(" | ").append(k.stream().filter(Trial::named).count()).append(" of ").append(k.size())
                    .append(" | ").append(k.stream().filter(Trial::hang).count())
                    .append(" | ").append(k.stream().filter(Trial::corrupt).count())
                    .append(" | ").append(k.stream().filter(Trial::residue).count())
                    .append(" | ").append(times.length == 0 ? "-" : Long.toString(times[times.length / 2]))
                    .append(" | ").append(times.length == 0 ? "-" : Long.toString(times[(int) (times.length * 0.9)]))
                    .append(" | ").append(times.length == 0 ? "-" : Long.toString(times[times.length - 1])).append(" |\n");
        }
        b.append("\nRaw trials (n, kind, ranks, victim, detail, delay ms, hang, corrupt, residue, named, blamed by each"
                + " survivor, fault-to-last-end ms):\n\n```\n");
        for (Trial t : results) {
            b.append(t.n()).append(',').append(t.kind()).append(',').append(t.ranks()).append(',').append(t.victim())
                    .append(",\"").append(t.detail()).append("\",").append(t.delayMs()).append(',').append(t.hang())
                    .append(',').append(t.corrupt()).append(',').append(t.residue()).append(',').append(t.named())
                    .append(",\"").append(t.blamed()).append("\",").append(t.faultToLastEndMs()).append('\n');
        }
        b.append("```\n");
        Path parent = out.toAbsolutePath().getParent();
        Files.createDirectories(parent);
        Files.writeString(out, b.toString());
    }
}
