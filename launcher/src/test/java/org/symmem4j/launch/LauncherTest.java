package org.symmem4j.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The launcher with real processes ({@code sh} programs): variables, output, the secret, and what
 * happens when a process fails, is killed, cannot start, or when the launcher itself is terminated.
 * No timing is asserted: waits are bounded only so that a broken launcher fails instead of hanging.
 */
class LauncherTest {

    static Launcher.Result launch(Map<String, String> extraEnv, String... args) {
        Map<String, String> env = Launcher.newJobEnvironment(System.getenv());
        env.remove("OMP_NUM_THREADS");
        env.putAll(extraEnv);
        return Launcher.runCapturing(List.of(args), env);
    }

    static Launcher.Result launch(String... args) {
        return launch(Map.of(), args);
    }

    @Test
    void everyRankGetsItsVariablesAndItsOutputIsPrefixed() {
        Launcher.Result r = launch("-n", "3", "--cpu-bind", "none", "--", "sh", "-c",
                "echo \"rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE lws=$LOCAL_WORLD_SIZE node=$GROUP_RANK"
                        + " master=$MASTER_ADDR:$MASTER_PORT\"");
        assertEquals(0, r.status(), r.err());
        for (int rank = 0; rank < 3; rank++) {
            assertTrue(r.out().contains("[rank " + rank + "] rank=" + rank + " local=" + rank + " world=3 lws=3 node=0"
                    + " master=127.0.0.1:29500"), r.out());
        }
        assertTrue(r.err().contains("all 3 ranks exited 0"), r.err());
    }

    @Test
    void aGeneratedSecretIsPrivateSharedAndRemoved() {
        Launcher.Result r = launch("-n", "2", "--cpu-bind", "none", "--", "sh", "-c",
                "echo \"file=$SYMMEM4J_SECRET_FILE mode=$(stat -c %a \"$SYMMEM4J_SECRET_FILE\") dir=$(stat -c %a"
                        + " \"$(dirname \"$SYMMEM4J_SECRET_FILE\")\") bytes=$(wc -c < \"$SYMMEM4J_SECRET_FILE\")"
                        + " sum=$(cksum < \"$SYMMEM4J_SECRET_FILE\") run=$SYMMEM4J_RUN_ID\"");
        assertEquals(0, r.status(), r.err());
        Matcher m = Pattern.compile("\\[rank (\\d)] file=(\\S+) mode=600 dir=700 bytes=64 sum=(\\d+ \\d+) run=(\\S+)")
                .matcher(r.out());
        List<String> files = new ArrayList<>();
        List<String> sums = new ArrayList<>();
        List<String> runs = new ArrayList<>();
        while (m.find()) {
            files.add(m.group(2));
            sums.add(m.group(3));
            runs.add(m.group(4));
        }
        assertEquals(2, files.size(), r.out());
        assertEquals(files.get(0), files.get(1), "one secret for the job");
        assertEquals(sums.get(0), sums.get(1));
        assertEquals(runs.get(0), runs.get(1), "one run id for the job");
        assertFalse(Files.exists(Path.of(files.getFirst())), "the secret is removed when the launch ends");
        assertFalse(Files.exists(Path.of(files.getFirst()).getParent()), "and its directory");
    }

    /**
     * Waits (bounded, 30 s) until the file {@code $MARK/name} exists: another process got that far. {@code MARK}
     * comes from the environment given to the launcher, which its processes inherit.
     */
    static String awaitMark(String name) {
        return ": \"${MARK:?}\"; i=0; while [ ! -e \"$MARK/" + name + "\" ] && [ $i -lt 600 ]; do sleep 0.05;"
                + " i=$((i+1)); done; ";
    }

    @Test
    void aFailingRankStopsTheOthersAndItsCodeIsTheLaunchers(@TempDir Path mark) {
        // rank 1 fails once rank 2 ignores SIGTERM (else its SIGTERM may come first); rank 0 dies on SIGTERM;
        // rank 2 needs SIGKILL
        Launcher.Result r = launch(Map.of("MARK", mark.toString()), "-n", "3", "--cpu-bind", "none", "--grace-period", "1",
                "--", "sh", "-c", "if [ \"$RANK\" = 1 ]; then " + awaitMark("2") + "exit 3; fi;"
                        + " if [ \"$RANK\" = 2 ]; then trap '' TERM; touch \"${MARK:?}/2\"; fi; exec sleep 60");
        assertEquals(3, r.status(), r.err());
        assertTrue(r.err().contains("rank 1 (local rank 1, pid ") && r.err().contains("exited with code 3"), r.err());
        assertTrue(r.err().contains("rank 0 (SIGTERM)"), r.err());
        assertTrue(r.err().contains("rank 2 (SIGKILL after 1 s)"), r.err());
    }

    /**
     * The launcher called as a library from the common ForkJoinPool's threads ({@link CommonPoolLaunches}), in a JVM
     * whose pool has 2 workers and may add no spare: every launch ends with its job. A supervisor that waited through
     * {@code Process.onExit()}, whose future completes through a task of that pool, blocked the pool's workers in
     * waits only another worker could end ("Thread limit exceeded replacing blocked worker", or no end).
     */
    @Test
    void theLauncherRunsAsALibraryFromCommonPoolThreadsWhichItDoesNotNeed() throws Exception {
        Process p = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-Djava.util.concurrent.ForkJoinPool.common.parallelism=2",
                "-Djava.util.concurrent.ForkJoinPool.common.maximumSpares=0", "-cp", System.getProperty("java.class.path"),
                CommonPoolLaunches.class.getName(), "6").redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(p.waitFor(3, java.util.concurrent.TimeUnit.MINUTES), out);
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("common pool parallelism 2, 0 of 6 launches failed"), out);
    }

    @Test
    void aKilledRankIsNamedWithItsSignal() {
        Launcher.Result r = launch("-n", "1", "--cpu-bind", "none", "--", "sh", "-c", "kill -9 $$");
        assertEquals(137, r.status(), r.err());
        assertTrue(r.err().contains("rank 0 (local rank 0, pid ") && r.err().contains("was killed by signal 9 (SIGKILL)"),
                r.err());
    }

    @Test
    void aProgramThatCannotStartIsReported() {
        Launcher.Result r = launch("-n", "2", "--cpu-bind", "none", "--", "/nonexistent/symmem4j-program");
        assertEquals(127, r.status(), r.err());
        assertTrue(r.err().contains("could not start rank 0 (/nonexistent/symmem4j-program)"), r.err());
    }

    @Test
    void boundRanksRunOnTheirSlices() {
        Launcher.Result r = launch("-n", "2", "--", "sh", "-c",
                "echo \"omp=$OMP_NUM_THREADS $(grep Cpus_allowed_list /proc/self/status | tr -d '\\t')\"");
        assertEquals(0, r.status(), r.err());
        if (Machine.onPath(System.getenv("PATH"), "taskset") == null) {
            assertTrue(r.err().contains("taskset is not on the PATH"), r.err());
            return;
        }
        List<Integer> cpus = new ArrayList<>();
        Matcher m = Pattern.compile("\\[rank (\\d)] omp=(\\d+) Cpus_allowed_list:(\\S+)").matcher(r.out());
        while (m.find()) {
            List<Integer> mine = CpuList.parse(m.group(3));
            assertEquals(Integer.parseInt(m.group(2)), mine.size(), "OMP_NUM_THREADS is the slice: " + r.out());
            cpus.addAll(mine);
        }
        assertEquals(2, r.out().lines().filter(l -> l.contains("omp=")).count(), r.out());
        if (Machine.discover(System.getenv()).allowedCpus().size() >= 2) {
            assertEquals(cpus.stream().distinct().count(), cpus.size(), "disjoint slices: " + r.out());
        }
    }

    @Test
    void processesInheritTheEnvironmentGivenToTheLauncher() {
        Launcher.Result r = launch(Map.of("SYMMEM4J_TEST_GIVEN", "given here"), "-n", "1", "--cpu-bind", "none", "--",
                "sh", "-c", "echo \"given=$SYMMEM4J_TEST_GIVEN secret=${SYMMEM4J_SECRET:-unset}\"");
        assertEquals(0, r.status(), r.err());
        // and not the launcher's JVM's: newJobEnvironment took the outer job's secret out, if any
        assertTrue(r.out().contains("[rank 0] given=given here secret=unset"), r.out());
    }

    @Test
    void outputGoesToTheLogDirectoryToo(@TempDir Path dir) throws IOException {
        Launcher.Result r = launch("-n", "2", "--cpu-bind", "none", "--log-dir", dir.toString(), "--", "sh", "-c", "echo hello $RANK");
        assertEquals(0, r.status(), r.err());
        assertEquals("hello 0\n", Files.readString(dir.resolve("rank-0.log")));
        assertEquals("hello 1\n", Files.readString(dir.resolve("rank-1.log")));
    }

    @Test
    void dryRunPrintsThePlanOfTheSecondMachine() {
        Launcher.Result r = launch("--dry-run", "-n", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--run-id",
                "job7", "--secret-file", "/s", "--cpu-bind", "none", "--", "app", "x");
        assertEquals(0, r.status(), r.err());
        assertTrue(r.out().contains("rank 2: ") && r.out().contains("rank 3: ") && r.out().contains("RANK=3")
                && r.out().contains("SYMMEM4J_SECRET_FILE=/s") && r.out().contains("app x"), r.out());
        assertTrue(r.err().contains("ranks 2..3 of 4, run id job7"), r.err());
    }

    @Test
    void torchrunsSpellingsAndTodaysNamesPlanTheSameJob(@TempDir Path tmp) {
        String logs = tmp.resolve("logs").toString();
        String[] torchrun = {"--dry-run", "--nproc_per_node", "2", "--nnodes", "2", "--node_rank", "1", "--master_addr",
            "10.0.0.1", "--master_port", "29600", "--rdzv_id", "job7", "--max_restarts", "1", "--log_dir", logs,
            "--secret-file", "/s", "--cpu-bind", "none", "--", "app", "x"};
        String[] hyphens = {"--dry-run", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr",
            "10.0.0.1", "--master-port", "29600", "--rdzv-id", "job7", "--max-restarts", "1", "--log-dir", logs,
            "--secret-file", "/s", "--cpu-bind", "none", "--", "app", "x"};
        String[] todays = {"--dry-run", "-n", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
            "--master-port", "29600", "--run-id", "job7", "--max-restarts", "1", "--log-dir", logs, "--secret-file", "/s",
            "--cpu-bind", "none", "--", "app", "x"};
        Launcher.Result reference = launch(todays);
        assertEquals(0, reference.status(), reference.err());
        assertTrue(reference.out().contains("RANK=3") && reference.out().contains("MASTER_PORT=29600")
                && reference.out().contains("MASTER_ADDR=10.0.0.1"), reference.out());
        assertTrue(reference.err().contains("ranks 2..3 of 4, run id job7") && reference.err().contains("at most 1 restart"),
                reference.err());
        for (String[] spelling : List.of(torchrun, hyphens)) {
            Launcher.Result r = launch(spelling);
            assertEquals(0, r.status(), r.err());
            assertEquals(reference.out(), r.out(), String.join(" ", spelling));
            assertEquals(reference.err(), r.err(), String.join(" ", spelling));
        }
    }

    @Test
    void standaloneRunsOnAFreeLoopbackPortWithAFreshRunId() {
        Launcher.Result r = launch("--standalone", "--nnodes", "1", "--nproc-per-node", "2", "--cpu-bind", "none", "--",
                "sh", "-c", "echo \"$MASTER_ADDR $MASTER_PORT $SYMMEM4J_RUN_ID\"");
        assertEquals(0, r.status(), r.err());
        List<String> seen = r.out().lines().map(l -> l.replaceFirst("^\\[rank \\d\\] ", "")).distinct().toList();
        assertEquals(1, seen.size(), "both ranks see one store and one run id: " + r.out());
        String[] addrPortRun = seen.getFirst().split(" ");
        assertEquals("127.0.0.1", addrPortRun[0], r.out());
        int port = Integer.parseInt(addrPortRun[1]);
        assertTrue(port > 0 && port < 65536, r.out());
        assertTrue(r.err().contains("run id " + addrPortRun[2]), r.err());
        Launcher.Result again = launch("--standalone", "-n", "1", "--cpu-bind", "none", "--", "sh", "-c",
                "echo \"$SYMMEM4J_RUN_ID\"");
        assertEquals(0, again.status(), again.err());
        assertFalse(again.out().contains(addrPortRun[2]), "a second standalone job gets its own run id: " + again.out());
    }

    @Test
    void standaloneRefusesOptionsThatPlaceTheJobElsewhere() {
        for (List<String> contradicting : List.of(List.of("--nnodes", "2"), List.of("--master-port", "29600"),
                List.of("--master_addr", "10.0.0.1"), List.of("--node-rank", "0"))) {
            List<String> args = new ArrayList<>(List.of("--standalone", "-n", "1"));
            args.addAll(contradicting);
            args.addAll(List.of("--", "sh", "-c", "true"));
            Launcher.Result r = launch(args.toArray(String[]::new));
            assertEquals(2, r.status(), contradicting + ": " + r.err());
            assertTrue(r.err().contains("--standalone runs a job of this machine alone")
                    && r.err().contains(contradicting.getFirst().replace('_', '-')), contradicting + ": " + r.err());
        }
    }

    @Test
    void javaGivesEveryProcessTheThreeFlags() {
        Launcher.Result r = launch("--dry-run", "-n", "1", "--cpu-bind", "none", "--java", "-cp", "a.jar", "Main");
        assertEquals(0, r.status(), r.err());
        assertTrue(r.out().contains("/bin/java --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector"
                + " --sun-misc-unsafe-memory-access=allow -cp a.jar Main"), r.out());
    }

    @Test
    void badRequestsExitTwoSayingWhy() {
        Launcher.Result zero = launch("-n", "0", "--", "sh");
        assertEquals(2, zero.status());
        assertTrue(zero.err().contains("--nproc-per-node=0: expected a number >= 1"), zero.err());
        Launcher.Result typo = launch("-n", "2", "--nprocs", "2", "sh");
        assertEquals(2, typo.status());
        assertTrue(typo.err().contains("the command starts with '--nprocs'"), typo.err());
        Launcher.Result noCommand = launch("-n", "2");
        assertEquals(2, noCommand.status());
        assertTrue(noCommand.err().contains("no command to start"), noCommand.err());
        Launcher.Result bind = launch("--cpu-bind", "some", "sh");
        assertEquals(2, bind.status());
        assertTrue(bind.err().contains("expected auto or none"), bind.err());
        Launcher.Result restarts = launch("--max-restarts", "-1", "sh");
        assertEquals(2, restarts.status());
        assertTrue(restarts.err().contains("--max-restarts=-1 must be >= 0"), restarts.err());
        Launcher.Result delay = launch("--max-restarts", "1", "--restart-delay", "-1", "sh");
        assertEquals(2, delay.status());
        assertTrue(delay.err().contains("--restart-delay=-1.0 outside [0, 3600] seconds"), delay.err());
        Launcher.Result unreadable = launch("--max-restarts", "1", "--secret-file", "/nonexistent/secret", "--", "sh", "-c",
                "echo started");
        assertEquals(2, unreadable.status(), unreadable.err());
        assertTrue(unreadable.err().contains("cannot be read"), unreadable.err());
        assertFalse(unreadable.out().contains("started"), "nothing starts: " + unreadable.out());
    }

    /** {@code --nnodes MIN:MAX}: what it cannot do is refused before anything starts or listens. */
    @Test
    void elasticNodeRangesRefuseWhatTheyCannotDo() {
        Map<String, String> secret = Map.of("SYMMEM4J_SECRET", "s");
        String[][] cases = {
            {"--nnodes=3:2: expected MIN:MAX with 1 <= MIN <= MAX and MAX >= 2, found MIN=3 MAX=2", "--nnodes", "3:2"},
            {"--nnodes=1:1: expected MIN:MAX with 1 <= MIN <= MAX and MAX >= 2", "--nnodes", "1:1"},
            {"--nnodes=two: expected a number of machines or MIN:MAX", "--nnodes", "two"},
            {"--nnodes=2:3 without --max-restarts: the job goes on with the machines it still has only when it"
                    + " restarts", "--nnodes", "2:3", "--run-id", "j"},
            {"--node-rank 1 with --nnodes 2:3: the rendezvous assigns node ranks", "--nnodes", "2:3", "--node-rank", "1",
                "--max-restarts", "1", "--run-id", "j"},
            {"--on-failure shrink with --nnodes 2:3", "--nnodes", "2:3", "--on-failure", "shrink", "--max-restarts", "1",
                "--run-id", "j"},
            {"--nproc-per-node=1:2 with --nnodes 3: a range of processes is for one machine", "--nnodes", "2:3", "-n",
                "1:2", "--max-restarts", "1", "--run-id", "j"},
            {"--rdzv-last-call=-1.0 --rdzv-timeout=600.0: expected a last call in [0, 3600] s", "--nnodes", "2:3",
                "--rdzv-last-call", "-1", "--max-restarts", "1", "--run-id", "j"},
            {"the rendezvous port, --master-port + --max-restarts + 1 = 65536, is past 65535", "--nnodes", "2:3",
                "--master-port", "65534", "--max-restarts", "1", "--run-id", "j"},
            {"without --run-id", "--nnodes", "2:3", "--max-restarts", "1"},
        };
        for (String[] c : cases) {
            List<String> args = new ArrayList<>(List.of(c).subList(1, c.length));
            args.addAll(List.of("--", "sh", "-c", "echo started"));
            Launcher.Result r = launch(secret, args.toArray(String[]::new));
            assertEquals(2, r.status(), r.err());
            assertTrue(r.err().contains(c[0]) && r.err().contains("fix:"), c[0] + " in: " + r.err());
            assertFalse(r.out().contains("started"), "nothing starts: " + r.out());
        }
        Launcher.Result noSecret = launch("--nnodes", "2:3", "--max-restarts", "1", "--run-id", "j", "--", "sh");
        assertEquals(2, noSecret.status());
        assertTrue(noSecret.err().contains("--nnodes=3 without a secret"), noSecret.err());
    }

    /**
     * SIGTERM to the launcher stops every process it started, and it exits as a terminated program does; in a
     * restarted job, the generation running then, and no other starts.
     */
    @ParameterizedTest(name = "restarted: {0}")
    @ValueSource(booleans = {false, true})
    @Timeout(180)
    void terminatingTheLauncherStopsItsProcesses(boolean restarted) throws Exception {
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        List<String> cmd = new ArrayList<>(List.of(java.toString(), "-cp", System.getProperty("java.class.path"),
                Launcher.class.getName(), "-n", "2", "--cpu-bind", "none", "--grace-period", "5"));
        if (restarted) { // generation 0 fails at once; generation 1's processes say their pids and run until stopped
            cmd.addAll(List.of("--max-restarts", "2", "--restart-delay", "0", "--", "sh", "-c",
                    "if [ \"$SYMMEM4J_RESTART_GENERATION\" = 0 ]; then if [ \"$RANK\" = 1 ]; then exit 3; fi;"
                            + " exec sleep 300; fi; echo pid=$$; exec sleep 300"));
        } else {
            cmd.addAll(List.of("--", "sh", "-c", "echo pid=$$; exec sleep 300"));
        }
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().remove("SYMMEM4J_SECRET");
        pb.environment().remove("SYMMEM4J_SECRET_FILE");
        Process launcher = pb.start();
        List<Long> pids = new ArrayList<>();
        StringBuilder seen = new StringBuilder();
        BufferedReader in = new BufferedReader(new InputStreamReader(launcher.getInputStream(), StandardCharsets.UTF_8));
        Pattern pid = Pattern.compile("\\[rank \\d] pid=(\\d+)");
        Thread reader = Thread.ofPlatform().daemon().start(() -> {
            try {
                String line;
                while ((line = in.readLine()) != null) {
                    synchronized (seen) {
                        seen.append(line).append('\n');
                        Matcher m = pid.matcher(line);
                        if (m.find()) {
                            pids.add(Long.parseLong(m.group(1)));
                        }
                        seen.notifyAll();
                    }
                }
            } catch (IOException ignored) {
                // the launcher is gone
            }
        });
        synchronized (seen) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (pids.size() < 2 && System.nanoTime() < deadline) {
                seen.wait(1000);
            }
            assertEquals(2, pids.size(), "both processes started: " + seen);
        }
        // SIGTERM through the handle: Process.destroy() would also close our end of its output
        launcher.toHandle().destroy();
        assertTrue(launcher.waitFor(60, TimeUnit.SECONDS), "the launcher ends");
        reader.join(10_000);
        assertEquals(143, launcher.exitValue(), "exits as a program terminated by SIGTERM: " + seen);
        for (long p : pids) {
            ProcessHandle h = ProcessHandle.of(p).orElse(null);
            assertTrue(h == null || h.onExit().get(30, TimeUnit.SECONDS) != null, "process " + p + " stopped");
        }
        synchronized (seen) {
            assertTrue(seen.toString().contains("interrupted; stopped rank 0 (SIGTERM), rank 1 (SIGTERM)")
                    || seen.toString().contains("interrupted; stopped rank 1 (SIGTERM), rank 0 (SIGTERM)"), seen.toString());
        }
        if (restarted) {
            synchronized (seen) {
                assertTrue(seen.toString().contains("restarting as generation 1"), seen.toString());
                assertFalse(seen.toString().contains("generation 2"), "no generation after the interruption: " + seen);
            }
        }
    }

    // ---------------------------------------------------------------- restarts (--max-restarts)

    /** What each process of a restartable job says about itself: generation, run id, port and secret. */
    static final String SAY_WHO = "echo \"gen=$SYMMEM4J_RESTART_GENERATION torch=$TORCHELASTIC_RESTART_COUNT"
            + " max=$TORCHELASTIC_MAX_RESTARTS run=$SYMMEM4J_RUN_ID port=$MASTER_PORT file=$SYMMEM4J_SECRET_FILE"
            + " mode=$(stat -c %a \"$SYMMEM4J_SECRET_FILE\") sum=$(cksum < \"$SYMMEM4J_SECRET_FILE\" | tr ' ' _)\"; ";
    /**
     * Rank 1 exits 3 in generation 0, once rank 0 has said who it is (rank 0 then waits to be stopped); every rank
     * of a later generation exits 0. Needs {@code MARK}, a directory.
     */
    static final String FAILS_ONCE = SAY_WHO + "if [ \"$SYMMEM4J_RESTART_GENERATION\" = 0 ]; then"
            + " if [ \"$RANK\" = 1 ]; then " + awaitMark("said-$SYMMEM4J_RUN_ID") + "exit 3; fi;"
            + " touch \"${MARK:?}/said-$SYMMEM4J_RUN_ID\"; exec sleep 60; fi; exit 0";

    /** One line of {@link #SAY_WHO}. */
    record Who(int rank, int gen, String torch, String max, String run, int port, String file, String mode, String sum) {
    }

    static List<Who> whos(String out) {
        Matcher m = Pattern.compile("\\[rank (\\d)] gen=(\\d+) torch=(\\S*) max=(\\S*) run=(\\S+) port=(\\d+) file=(\\S+)"
                + " mode=(\\d+) sum=(\\S+)").matcher(out);
        List<Who> all = new ArrayList<>();
        while (m.find()) {
            all.add(new Who(Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)), m.group(3), m.group(4), m.group(5),
                    Integer.parseInt(m.group(6)), m.group(7), m.group(8), m.group(9)));
        }
        return all;
    }

    static Who who(List<Who> all, int rank, int gen) {
        return all.stream().filter(w -> w.rank() == rank && w.gen() == gen).findFirst()
                .orElseThrow(() -> new AssertionError("no line of rank " + rank + " in generation " + gen + ": " + all));
    }

    /** A port free now whose next one is free too (generation 0's and 1's, by the rule {@code --master-port + g}). */
    static int freePortWithFreeNext() throws IOException {
        for (int attempt = 0; ; attempt++) {
            try (ServerSocket first = new ServerSocket(0)) {
                int port = first.getLocalPort();
                if (port < 65535) {
                    try (ServerSocket next = new ServerSocket(port + 1)) {
                        return port;
                    } catch (IOException taken) {
                        if (attempt > 100) {
                            throw taken;
                        }
                    }
                }
            }
        }
    }

    @Test
    @Timeout(120)
    void aRankThatFailsOnceIsRestartedWithANewRunIdPortAndSecret(@TempDir Path mark) throws IOException {
        int port = freePortWithFreeNext();
        Launcher.Result r = launch(Map.of("MARK", mark.toString()), "-n", "2", "--cpu-bind", "none", "--master-port",
                Integer.toString(port), "--max-restarts", "1", "--restart-delay", "0", "--", "sh", "-c", FAILS_ONCE);
        assertEquals(0, r.status(), r.err() + r.out());
        assertTrue(r.err().contains("generation 0 failed: rank 1 (local rank 1, pid ") && r.err().contains("exited with code 3"),
                r.err());
        assertTrue(r.err().contains("restarting as generation 1 (restart 1 of 1, 0 left after it)"), r.err());
        assertTrue(r.err().contains("all 2 ranks exited 0"), r.err());
        List<Who> all = whos(r.out());
        assertEquals(4, all.size(), r.out());
        for (int gen = 0; gen < 2; gen++) {
            Who a = who(all, 0, gen);
            Who b = who(all, 1, gen);
            assertEquals(a.run(), b.run(), "one run id per generation");
            assertEquals(a.sum(), b.sum(), "one secret per generation");
            assertEquals(Integer.toString(gen), a.torch(), "torchrun's restart count is the generation");
            assertEquals("1", a.max());
            assertEquals("600", a.mode());
            assertEquals(port + gen, a.port(), "--master-port + g, free");
        }
        Who g0 = who(all, 0, 0);
        Who g1 = who(all, 0, 1);
        assertNotEquals(g0.run(), g1.run(), "a new run id");
        assertEquals(g0.run() + "-g1", g1.run());
        assertNotEquals(g0.sum(), g1.sum(), "a new secret");
        assertNotEquals(g0.file(), g1.file());
        assertFalse(Files.exists(Path.of(g0.file())) || Files.exists(Path.of(g1.file())), "every secret removed at the end");
    }

    @Test
    @Timeout(120)
    void aRestartWhosePortAnotherProgramHoldsTakesAFreeOneOnOneMachine(@TempDir Path mark) throws IOException {
        int port = freePortWithFreeNext();
        try (ServerSocket squatter = new ServerSocket(port + 1)) { // another program listens on generation 1's port
            Launcher.Result r = launch(Map.of("MARK", mark.toString()), "-n", "2", "--cpu-bind", "none", "--master-port",
                    Integer.toString(port), "--max-restarts", "1", "--restart-delay", "0", "--", "sh", "-c", FAILS_ONCE);
            assertEquals(0, r.status(), r.err() + r.out());
            assertTrue(r.err().contains("symmem4j-run: generation 1: port " + (port + 1) + " (--master-port " + port
                    + " + 1) is in use on 127.0.0.1; taking port "), r.err());
            List<Who> all = whos(r.out());
            assertEquals(port, who(all, 0, 0).port(), "generation 0 keeps --master-port");
            int taken = who(all, 0, 1).port();
            assertNotEquals(port + 1, taken, "not the port in use");
            assertEquals(taken, who(all, 1, 1).port(), "every process of generation 1 gets the same port");
            assertTrue(r.err().contains("generation 1: run id " + who(all, 0, 1).run() + ", port " + taken + ","), r.err());
            assertTrue(r.err().contains("all 2 ranks exited 0"), r.err());
        }
    }

    @Test
    void onNodeZeroOfSeveralMachinesATakenRestartPortIsAnErrorNamingItAndTheFix() throws IOException {
        java.net.InetAddress own = null; // an address of this machine that is not loopback (a job of machines needs one)
        for (java.net.NetworkInterface nif : java.util.Collections.list(java.net.NetworkInterface.getNetworkInterfaces())) {
            for (java.net.InetAddress a : java.util.Collections.list(nif.getInetAddresses())) {
                if (nif.isUp() && a instanceof java.net.Inet4Address && !a.isLoopbackAddress()) {
                    own = a;
                }
            }
        }
        org.junit.jupiter.api.Assumptions.assumeTrue(own != null, "no non-loopback IPv4 address on this machine");
        int port = freePortWithFreeNext();
        LaunchSpec node0 = new LaunchSpec("2", 2, 0, own.getHostAddress(), port, "job7", LaunchSpec.CpuBind.NONE, null,
                false, List.of("sh"), 3);
        LaunchSpec node1 = new LaunchSpec("2", 2, 1, own.getHostAddress(), port, "job7", LaunchSpec.CpuBind.NONE, null,
                false, List.of("sh"), 3);
        assertEquals(port + 1, Launcher.restartPort(node0, 1), "free: the rule's port");
        try (ServerSocket squatter = new ServerSocket(port + 1)) {
            IllegalStateException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalStateException.class,
                    () -> Launcher.restartPort(node0, 1));
            assertTrue(e.getMessage().startsWith("its store port " + (port + 1) + " (--master-port " + port
                    + " + generation 1) is in use on " + own.getHostAddress()), e.getMessage());
            assertTrue(e.getMessage().contains("expected the ports " + port + ".." + (port + 3) + " free on node 0 (fix: a"
                    + " --master-port whose next 3 ports no other program uses, on every machine)"), e.getMessage());
            assertEquals(port + 1, Launcher.restartPort(node1, 1), "another machine's launcher cannot check node 0's port");
            LaunchSpec elsewhere = new LaunchSpec("2", 1, 0, "192.0.2.7", port, null, LaunchSpec.CpuBind.NONE, null,
                    false, List.of("sh"), 3); // TEST-NET-1: no address of this machine
            assertEquals(port + 1, Launcher.restartPort(elsewhere, 1), "a store elsewhere is not checked here");
            LaunchSpec alone = new LaunchSpec("2", 1, 0, "127.0.0.1", port, null, LaunchSpec.CpuBind.NONE, null,
                    false, List.of("sh"), 3);
            int chosen = Launcher.restartPort(alone, 1);
            assertNotEquals(port + 1, chosen, "one machine: a free port instead");
            try (ServerSocket bindable = new ServerSocket(chosen, 1, java.net.InetAddress.getLoopbackAddress())) {
                assertEquals(chosen, bindable.getLocalPort(), "the chosen port is free");
            }
        }
    }

    @Test
    @Timeout(120)
    void withoutRestartsTheSameJobFailsWithTheRanksCode(@TempDir Path mark) {
        Launcher.Result r = launch(Map.of("MARK", mark.toString()), "-n", "2", "--cpu-bind", "none", "--", "sh", "-c", FAILS_ONCE);
        assertEquals(3, r.status(), r.err());
        assertTrue(r.err().contains("rank 1 (local rank 1, pid ") && r.err().contains("exited with code 3"), r.err());
        assertFalse(r.err().contains("restart"), r.err());
        assertEquals(2, whos(r.out()).size(), "generation 0 only: " + r.out());
    }

    @Test
    @Timeout(120)
    void aJobThatKeepsFailingStopsAfterItsRestartsNamingTheRank() {
        Launcher.Result r = launch("-n", "2", "--cpu-bind", "none", "--max-restarts", "2", "--restart-delay", "0", "--",
                "sh", "-c", SAY_WHO + "if [ \"$RANK\" = 1 ]; then exit 5; fi; exec sleep 60");
        assertEquals(5, r.status(), r.err());
        assertEquals(2, r.err().lines().filter(l -> l.contains("restarting as generation")).count(), r.err());
        assertTrue(r.err().contains("restarting as generation 2 (restart 2 of 2, 0 left after it)"), r.err());
        assertTrue(r.err().contains("symmem4j-run: generation 2 failed: rank 1 (local rank 1, pid "), r.err());
        assertTrue(r.err().contains("no restarts left (--max-restarts 2, all used): exiting with rank 1's code 5"
                + " (of generation 2)"), r.err());
        List<Who> all = whos(r.out());
        assertEquals(3, all.stream().map(Who::run).distinct().count(), "three generations, three run ids: " + all);
        assertEquals(3, all.stream().map(Who::sum).distinct().count(), "and three secrets: " + all);
    }

    @Test
    @Timeout(120)
    void aRankKilledMidRunIsRestarted() {
        // generation 0: rank 1 runs a while, then SIGKILLs itself; rank 0 runs until stopped. Generation 1 succeeds.
        Launcher.Result r = launch("-n", "2", "--cpu-bind", "none", "--max-restarts", "1", "--", "sh", "-c",
                "if [ \"$SYMMEM4J_RESTART_GENERATION\" = 1 ]; then echo \"started-at=$(date +%s%N)\"; exit 0; fi;"
                        + " if [ \"$RANK\" = 1 ]; then sleep 0.5; echo \"killed-at=$(date +%s%N)\"; kill -9 $$; fi;"
                        + " exec sleep 60");
        assertEquals(0, r.status(), r.err() + r.out());
        assertTrue(r.err().contains("generation 0 failed: rank 1 (local rank 1, pid ")
                && r.err().contains("was killed by signal 9 (SIGKILL)"), r.err());
        Matcher killed = Pattern.compile("killed-at=(\\d+)").matcher(r.out());
        assertTrue(killed.find(), r.out());
        long killedAt = Long.parseLong(killed.group(1));
        Matcher started = Pattern.compile("started-at=(\\d+)").matcher(r.out());
        long firstStart = Long.MAX_VALUE;
        int starts = 0;
        while (started.find()) {
            firstStart = Math.min(firstStart, Long.parseLong(started.group(1)));
            starts++;
        }
        assertEquals(2, starts, "both ranks of generation 1 ran: " + r.out());
        // measured, not asserted: the kill to the next generation's first process running (default --restart-delay 1 s)
        System.out.printf("kill -9 of rank 1 to generation 1's first process running: %.3f s%n", (firstStart - killedAt) / 1e9);
    }

    @Test
    @Timeout(120)
    void aGivenSecretIsDerivedPerGenerationTheSameOnEveryMachine(@TempDir Path dir) throws IOException {
        Path secret = dir.resolve("s");
        Files.createFile(secret, java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
                java.nio.file.attribute.PosixFilePermissions.fromString("rw-------")));
        Files.writeString(secret, "the-job's-own-secret-0123456789\n");
        String given = cksum(secret);
        List<List<Who>> launches = new ArrayList<>();
        for (int i = 0; i < 2; i++) { // two launchers of one job (as on two machines) derive the same secrets
            Path mark = Files.createDirectory(dir.resolve("mark-" + i));
            Launcher.Result r = launch(Map.of("MARK", mark.toString()), "-n", "2", "--cpu-bind", "none", "--run-id", "job7",
                    "--secret-file", secret.toString(),
                    "--max-restarts", "1", "--restart-delay", "0", "--", "sh", "-c", FAILS_ONCE);
            assertEquals(0, r.status(), r.err() + r.out());
            launches.add(whos(r.out()));
        }
        Who g0 = who(launches.get(0), 0, 0);
        Who g1 = who(launches.get(0), 1, 1);
        assertEquals(secret.toString(), g0.file(), "generation 0 gets the given secret, as without restarts");
        assertEquals(given, g0.sum());
        assertEquals("job7-g1", g1.run());
        assertNotEquals(given, g1.sum(), "generation 1 gets a secret of its own");
        assertEquals(g1.sum(), who(launches.get(1), 0, 1).sum(), "derived the same by every launcher of the job");
        assertTrue(Files.exists(secret), "the given secret is the user's: kept");
        assertFalse(Files.exists(Path.of(g1.file())), "the derived one is removed at the end");
    }

    private static String cksum(Path f) throws IOException {
        try {
            Process p = new ProcessBuilder("sh", "-c", "cksum < \"$0\" | tr ' ' _", f.toString()).start();
            String s = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
            p.waitFor(30, TimeUnit.SECONDS);
            return s;
        } catch (InterruptedException e) {
            throw new IOException(e);
        }
    }
}
