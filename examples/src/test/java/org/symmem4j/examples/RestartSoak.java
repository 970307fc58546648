package org.symmem4j.examples;

import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.symmem4j.dl4j.train.CheckpointDirectory;

/**
 * The restart soak (issue 32), run by {@code bench/restart-soak.sh}: T trials of the 2-rank DL4J job of
 * {@link RestartAfterKillTest} ({@link RestartingTraining} under {@code symmem4j-run -n 2 --max-restarts 1}), each
 * with a {@code kill -9} of a random rank after a random step of generation 0, and one uninterrupted run first as the
 * reference. Per trial it records the time from the kill to generation 1's first step (both ranks' wall clocks, one
 * machine), the checkpoint resumed from and the steps redone (as the trainer logs them, and as the kill step says),
 * whether the trial hung (the launcher not back within the watchdog: then every process of the job is killed),
 * the torn checkpoints skipped and left, corrupt checkpoints (one loaded that was not complete when the rank died,
 * or a final model that differs), whether the final model equals the reference bitwise, and residue (a process,
 * a {@code /dev/shm} file or a listening port of the job left). Writes the raw CSV and a summary in markdown.
 *
 * <pre>RestartSoak trials=100 seed=1 minutes=20 watchdog=120 csv=FILE md=FILE work=DIR [note=TEXT]</pre>
 * {@code minutes}: no trial starts after that long (the trials done are reported).
 */
public final class RestartSoak {

    private static final Pattern KILL = Pattern.compile("\\[rank (\\d)\\] KILL rank \\d generation 0 after step (\\d+) at (\\d+) ms");
    private static final Pattern RESUMED = Pattern.compile("\\[rank 0\\] RESUMED generation 1 from step (\\d+)");
    private static final Pattern REDONE = Pattern.compile("\\[rank 0\\] REDONE generation 1: progress (-?\\d+),"
            + " resumed from step (\\d+), (\\d+) steps redone");
    private static final Pattern FIRST = Pattern.compile("\\[rank \\d\\] FIRST STEP (\\d+) of generation 1 at (\\d+) ms");
    private static final Pattern SKIPPED = Pattern.compile("symmem4j checkpoint: skipping ");

    /** One trial's record: a CSV row. */
    record Trial(int trial, int rank, long killStep, int status, long resumedFrom, long expectedFrom, long redoneLogged,
                 long redone, double killToFirstStepS, boolean hang, int tornSkipped, int tornLeft, boolean corrupt,
                 boolean equal, boolean residue, double wallS) {

        static final String HEADER = "trial,rank,kill_step,status,resumed_from,expected_from,redone_logged,redone,"
                + "kill_to_first_step_s,hang,torn_skipped,torn_left,corrupt,equal,residue,wall_s";

        String csv() {
            return String.format(Locale.ROOT, "%d,%d,%d,%d,%d,%d,%d,%d,%.3f,%d,%d,%d,%d,%d,%d,%.1f", trial, rank, killStep,
                    status, resumedFrom, expectedFrom, redoneLogged, redone, killToFirstStepS, hang ? 1 : 0, tornSkipped,
                    tornLeft, corrupt ? 1 : 0, equal ? 1 : 0, residue ? 1 : 0, wallS);
        }
    }

    private RestartSoak() {
    }

    public static void main(String[] args) throws Exception {
        // the soak measures recovery times: its ranks run as a user's JVMs do, not with the tests' light flags
        System.setProperty(LaunchedJvm.DEFAULT_JVMS, "true");
        Map<String, String> o = new LinkedHashMap<>(Map.of("trials", "100", "seed", "1", "minutes", "20",
                "watchdog", "120", "csv", "restart-soak.csv", "md", "restart-soak.md", "work", "/tmp/restart-soak",
                "note", "", "parallel", "1"));
        for (String a : args) {
            int eq = a.indexOf('=');
            if (eq < 0 || !o.containsKey(a.substring(0, eq))) {
                throw new IllegalArgumentException("argument '" + a + "': expected one of " + o.keySet() + " as key=value");
            }
            o.put(a.substring(0, eq), a.substring(eq + 1));
        }
        int trials = Integer.parseInt(o.get("trials"));
        long seed = Long.parseLong(o.get("seed"));
        Duration budget = Duration.ofSeconds((long) (Double.parseDouble(o.get("minutes")) * 60));
        Duration watchdog = Duration.ofSeconds(Long.parseLong(o.get("watchdog")));
        Path work = Path.of(o.get("work"));
        Path csv = Path.of(o.get("csv"));
        Path md = Path.of(o.get("md"));
        int parallel = Integer.parseInt(o.get("parallel"));
        if (parallel < 1) {
            throw new IllegalArgumentException("parallel=" + parallel + ": expected >= 1 (trials at once; each job has 2"
                    + " ranks of one ND4J thread, so about a third of the cores, e.g. parallel=5 on 16)");
        }
        // one job at a time: each launcher binds its ranks to CPU slices of its own; several at once: none, so the
        // jobs' ranks do not all land on the first cores
        List<String> launcherOptions = parallel == 1 ? List.of() : List.of("--cpu-bind", "none");
        deleteTree(work);
        Files.createDirectories(work);
        Instant began = Instant.now();
        String loadBefore = loadAverage();

        long refStart = System.nanoTime();
        RestartAfterKillTest.Job plain = runBounded(work.resolve("reference"), watchdog, launcherOptions, new String[0]);
        double refWall = (System.nanoTime() - refStart) / 1e9;
        if (plain == null || plain.result().status() != 0) {
            throw new IllegalStateException("the uninterrupted reference run failed: "
                    + (plain == null ? "hung" : plain.log()));
        }
        MultiLayerNetwork reference = ModelSerializer.restoreMultiLayerNetwork(plain.model().toFile(), true);
        System.out.printf(Locale.ROOT, "reference run: %.1f s%n", refWall);

        List<Trial> done = new ArrayList<>();
        java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(parallel,
                Thread.ofPlatform().name("restart-soak-trial-", 0).daemon().factory());
        try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(csv, StandardCharsets.UTF_8))) {
            out.println(Trial.HEADER);
            List<java.util.concurrent.Future<Trial>> started = new ArrayList<>();
            for (int t = 0; t < trials; t++) {
                int n = t;
                started.add(pool.submit(() -> {
                    if (Duration.between(began, Instant.now()).compareTo(budget) > 0) {
                        return null; // the time budget is spent: this trial does not start
                    }
                    SplittableRandom rnd = new SplittableRandom(seed * 1_000_003L + n);
                    int rank = rnd.nextInt(2);
                    long step = 1 + rnd.nextLong(RestartAfterKillTest.STEPS - 1);
                    Trial trial = trial(n, rank, step, work.resolve("trial-" + n), watchdog, reference, launcherOptions);
                    synchronized (out) {
                        out.println(trial.csv());
                        out.flush();
                        System.out.println(trial.csv());
                    }
                    deleteTree(work.resolve("trial-" + n));
                    return trial;
                }));
            }
            for (java.util.concurrent.Future<Trial> f : started) {
                Trial trial = f.get();
                if (trial != null) {
                    done.add(trial);
                }
            }
            if (done.size() < trials) {
                System.out.printf(Locale.ROOT, "time budget of %s spent after %d trials%n", budget, done.size());
            }
        } finally {
            pool.shutdownNow();
        }
        Files.writeString(md, summary(done, trials, seed, refWall, budget, watchdog, loadBefore, loadAverage(),
                began, csv, o.get("note") + (parallel == 1 ? "" : " (" + parallel + " trials at once, --cpu-bind none)")),
                StandardCharsets.UTF_8);
        System.out.println("wrote " + csv + " and " + md);
        System.out.println(summaryLine(done, parallel));
    }

    /**
     * The soak in one line, for a device call's last words: trials, the slowest kill to first step, hangs, corrupt
     * checkpoints loaded, final models not bitwise equal to the reference.
     */
    static String summaryLine(List<Trial> trials, int parallel) {
        double max = trials.stream().filter(t -> !t.hang() && !Double.isNaN(t.killToFirstStepS()))
                .mapToDouble(Trial::killToFirstStepS).max().orElse(Double.NaN);
        return String.format(Locale.ROOT, "SUMMARY trials=%d max_kill_to_first_step_s=%.2f hangs=%d corrupt=%d unequal=%d"
                        + " residue=%d parallel=%d", trials.size(), max, trials.stream().filter(Trial::hang).count(),
                trials.stream().filter(Trial::corrupt).count(),
                trials.stream().filter(t -> !t.hang() && !t.equal()).count(),
                trials.stream().filter(Trial::residue).count(), parallel);
    }

    /** Launches the job; null when it did not come back within the watchdog (every process of it then killed). */
    private static RestartAfterKillTest.Job runBounded(Path dir, Duration watchdog, List<String> launcherOptions,
                                                       String[] faults) throws Exception {
        Files.createDirectories(dir);
        // its own thread, so that the watchdog below can give up on a launcher that does not come back
        CompletableFuture<RestartAfterKillTest.Job> job = new CompletableFuture<>();
        Thread.ofPlatform().name("restart-soak-" + dir.getFileName()).daemon().start(() -> {
            try {
                job.complete(RestartAfterKillTest.launch(dir, 1, launcherOptions, faults));
            } catch (IOException | RuntimeException e) {
                job.completeExceptionally(e);
            }
        });
        try {
            return job.get(watchdog.toSeconds(), TimeUnit.SECONDS);
        } catch (TimeoutException hang) {
            // the launcher restarts what it sees die: kill until it is back (its last generation ends)
            long deadline = System.nanoTime() + Duration.ofMinutes(2).toNanos();
            while (!job.isDone() && System.nanoTime() < deadline) {
                // this trial's processes only (their command names its directory): other trials may run beside it
                ProcessHandle.current().descendants().filter(p -> p.info().commandLine().map(c -> c.contains(dir.toString()))
                        .orElse(false)).forEach(ProcessHandle::destroyForcibly);
                try {
                    job.get(1, TimeUnit.SECONDS);
                } catch (TimeoutException stillThere) {
                    // kill again
                }
            }
            if (job.isDone() && !job.isCompletedExceptionally()) { // kept for a look: the work directory outlives the soak
                Files.writeString(dir.resolveSibling(dir.getFileName() + "-hang.log"), job.get().log(),
                        StandardCharsets.UTF_8);
            }
            return null;
        } catch (ExecutionException e) {
            throw new IllegalStateException("launch failed: " + e.getCause(), e.getCause());
        }
    }

    private static Trial trial(int t, int rank, long step, Path dir, Duration watchdog, MultiLayerNetwork reference,
                               List<String> launcherOptions) throws Exception {
        long started = System.nanoTime();
        RestartAfterKillTest.Job job = runBounded(dir, watchdog, launcherOptions,
                new String[] {"kill@g0r" + rank + "s" + step});
        double wall = (System.nanoTime() - started) / 1e9;
        long expectedFrom = RestartAfterKillTest.newestCheckpointBefore(step);
        Path root = dir.resolve("checkpoints");
        int tornLeft = 0;
        for (Path d : stepDirs(root)) {
            try {
                CheckpointDirectory.verify(d);
            } catch (IOException torn) {
                tornLeft++;
            }
        }
        if (job == null) {
            System.out.println("trial " + t + " hung: the job was killed after the watchdog's " + watchdog);
            return new Trial(t, rank, step, -1, -1, expectedFrom, -1, -1, Double.NaN, true, 0, tornLeft, false, false,
                    ProcessHandle.current().descendants().anyMatch(p -> p.info().commandLine()
                            .map(c -> c.contains(dir.toString())).orElse(false)), wall);
        }
        String out = job.result().out();
        Matcher kill = KILL.matcher(out);
        long killedAt = kill.find() ? Long.parseLong(kill.group(3)) : -1;
        Matcher resumed = RESUMED.matcher(out);
        long from = resumed.find() ? Long.parseLong(resumed.group(1)) : 0;
        Matcher redone = REDONE.matcher(out);
        long redoneLogged = redone.find() ? Long.parseLong(redone.group(3)) : -1;
        long firstAt = Long.MAX_VALUE;
        for (Matcher m = FIRST.matcher(out); m.find(); ) {
            firstAt = Math.min(firstAt, Long.parseLong(m.group(2)));
        }
        double killToFirst = killedAt < 0 || firstAt == Long.MAX_VALUE ? Double.NaN : (firstAt - killedAt) / 1000.0;
        int skipped = (int) SKIPPED.matcher(out).results().count();
        boolean equal = false;
        if (job.result().status() == 0 && Files.exists(job.model())) {
            MultiLayerNetwork found = ModelSerializer.restoreMultiLayerNetwork(job.model().toFile(), true);
            equal = Arrays.equals(RestartAfterKillTest.bits(reference.params().data().asFloat()),
                    RestartAfterKillTest.bits(found.params().data().asFloat()))
                    && Arrays.equals(RestartAfterKillTest.bits(reference.getUpdater().getStateViewArray().data().asFloat()),
                    RestartAfterKillTest.bits(found.getUpdater().getStateViewArray().data().asFloat()))
                    && reference.getIterationCount() == found.getIterationCount();
        }
        // a checkpoint newer than the newest one complete at the kill, or one loaded and trained on to another model
        boolean corrupt = from > expectedFrom || (job.result().status() == 0 && !equal);
        List<String> residue = RestartAfterKillTest.residue(job, 1);
        if (job.result().status() != 0 || !equal || corrupt || !residue.isEmpty()) { // kept: the work directory stays
            Path log = dir.resolveSibling(dir.getFileName() + ".log");
            Files.writeString(log, "left: " + residue + "\n" + job.log(), StandardCharsets.UTF_8);
            System.out.println("trial " + t + ": exit " + job.result().status() + ", equal " + equal + ", left "
                    + residue + "; log in " + log);
        }
        return new Trial(t, rank, step, job.result().status(), from, expectedFrom, redoneLogged, step - from, killToFirst,
                false, skipped, tornLeft, corrupt, equal, !residue.isEmpty(), wall);
    }

    private static List<Path> stepDirs(Path root) throws IOException {
        if (!Files.isDirectory(root)) {
            return List.of();
        }
        try (Stream<Path> s = Files.list(root)) {
            return s.filter(p -> p.getFileName().toString().startsWith("step-")).toList();
        }
    }

    static String summary(List<Trial> trials, int asked, long seed, double refWall, Duration budget, Duration watchdog,
                          String loadBefore, String loadAfter, Instant began, Path csv, String note) {
        StringBuilder b = new StringBuilder();
        List<Double> times = trials.stream().filter(t -> !t.hang() && !Double.isNaN(t.killToFirstStepS()))
                .map(Trial::killToFirstStepS).sorted().toList();
        long hangs = trials.stream().filter(Trial::hang).count();
        long corrupt = trials.stream().filter(Trial::corrupt).count();
        long unequal = trials.stream().filter(t -> !t.hang() && !t.equal()).count();
        long residue = trials.stream().filter(Trial::residue).count();
        long failed = trials.stream().filter(t -> !t.hang() && t.status() != 0).count();
        long maxRedone = trials.stream().filter(t -> !t.hang()).mapToLong(Trial::redone).max().orElse(-1);
        long redoneMismatch = trials.stream().filter(t -> !t.hang() && t.redoneLogged() != t.redone()
                && t.redoneLogged() != t.redone() - 1).count();
        long within10 = times.stream().filter(x -> x <= 10.0).count();
        b.append(String.format(Locale.ROOT, "%d trials of %d asked (seed %d, watchdog %d s, time budget %d min), started"
                        + " %s; load average before %s, after %s.%s%n%n", trials.size(), asked, seed, watchdog.toSeconds(),
                budget.toMinutes(), began, loadBefore, loadAfter, note.isBlank() ? "" : " " + note));
        b.append(String.format(Locale.ROOT, "Uninterrupted reference run (2 ranks, 2 epochs of %d steps, a checkpoint"
                + " every %d steps): %.1f s wall.%n%n", RestartAfterKillTest.STEPS / RestartAfterKillTest.EPOCHS,
                RestartAfterKillTest.EVERY, refWall));
        b.append("| measure | result |\n|---|---|\n");
        b.append(String.format(Locale.ROOT, "| kill -9 → first step of generation 1 (s) | min %s, median %s, p90 %s, max %s"
                        + " (%d trials) |%n", pct(times, 0), pct(times, 0.5), pct(times, 0.9), pct(times, 1), times.size()));
        b.append(String.format(Locale.ROOT, "| within 10 s of the kill | %d of %d |%n", within10, times.size()));
        b.append(String.format(Locale.ROOT, "| steps redone (kill step − resumed step) | max %d (K = %d); histogram %s |%n",
                maxRedone, RestartAfterKillTest.EVERY, histogram(trials)));
        b.append(String.format(Locale.ROOT, "| trainer's logged steps redone differs from the kill step's (by more than"
                + " the one step rank 0 records after its listener) | %d |%n", redoneMismatch));
        b.append(String.format(Locale.ROOT, "| hangs (launcher not back within %d s) | %d |%n", watchdog.toSeconds(), hangs));
        b.append(String.format(Locale.ROOT, "| launcher exit not 0 | %d |%n", failed));
        b.append(String.format(Locale.ROOT, "| corrupt checkpoints loaded | %d |%n", corrupt));
        b.append(String.format(Locale.ROOT, "| torn checkpoints skipped on resume / left torn at the end | %d / %d |%n",
                trials.stream().mapToInt(Trial::tornSkipped).sum(), trials.stream().mapToInt(Trial::tornLeft).sum()));
        b.append(String.format(Locale.ROOT, "| final model not bitwise equal to the reference | %d |%n", unequal));
        b.append(String.format(Locale.ROOT, "| residue (process, /dev/shm file or listening port of the job) | %d |%n",
                residue));
        b.append(String.format(Locale.ROOT, "| victims | rank 0: %d, rank 1: %d |%n",
                trials.stream().filter(t -> t.rank() == 0).count(), trials.stream().filter(t -> t.rank() == 1).count()));
        List<Trial> slowest = trials.stream().filter(t -> !Double.isNaN(t.killToFirstStepS()))
                .sorted(Comparator.comparingDouble(Trial::killToFirstStepS).reversed()).limit(3).toList();
        b.append(String.format(Locale.ROOT, "%nSlowest trials: %s. Raw data: `%s` (%s).%n", slowest.stream()
                .map(t -> String.format(Locale.ROOT, "#%d rank %d step %d %.2f s", t.trial(), t.rank(), t.killStep(),
                        t.killToFirstStepS())).toList(), csv.getFileName(), Trial.HEADER));
        return b.toString();
    }

    private static String histogram(List<Trial> trials) {
        Map<Long, Long> h = new java.util.TreeMap<>();
        for (Trial t : trials) {
            if (!t.hang()) {
                h.merge(t.redone(), 1L, Long::sum);
            }
        }
        return h.toString();
    }

    private static String pct(List<Double> sorted, double q) {
        if (sorted.isEmpty()) {
            return "-";
        }
        int i = (int) Math.min(sorted.size() - 1, Math.max(0, Math.ceil(q * sorted.size()) - 1));
        return String.format(Locale.ROOT, "%.2f", sorted.get(i));
    }

    private static String loadAverage() {
        try {
            return Files.readString(Path.of("/proc/loadavg")).trim();
        } catch (IOException e) {
            return "unknown";
        }
    }

    private static void deleteTree(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(dir)) {
            for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }
}
