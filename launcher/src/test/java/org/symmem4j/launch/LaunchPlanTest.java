package org.symmem4j.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.group.ProcessGroupConfig;
import org.symmem4j.parallel.rendezvous.JobIdentity;

/** The launcher's plan, as a pure function of the request, the machine and the environment. */
class LaunchPlanTest {

    static final Machine EIGHT_CPUS_TWO_GPUS = new Machine(List.of(0, 1, 2, 3, 4, 5, 6, 7), 2, "test", Path.of("/usr/bin/taskset"));
    static final Path SECRET = Path.of("/tmp/x/secret");

    static LaunchSpec spec(String nproc, int nnodes, int nodeRank, String addr, String runId, LaunchSpec.CpuBind bind,
                           boolean java, String... command) {
        return new LaunchSpec(nproc, nnodes, nodeRank, addr, 29500, runId, bind, null, java, List.of(command), 0);
    }

    static LaunchSpec oneMachine(String nproc, String... command) {
        return spec(nproc, 1, 0, "127.0.0.1", null, LaunchSpec.CpuBind.AUTO, false, command);
    }

    @Test
    void theJobsVariablesAreTheOnesTheLibraryReads() {
        // the launcher does not depend on the library at run time: its names are its own constants, kept equal here
        assertEquals(Configuration.RUN_ID.env(), LaunchPlan.RUN_ID_ENV);
        assertEquals(Configuration.SECRET.env(), LaunchPlan.SECRET_ENV);
        assertEquals(Configuration.SECRET_FILE.env(), LaunchPlan.SECRET_FILE_ENV);
        assertEquals(Configuration.RESTART_GENERATION.env(), LaunchPlan.RESTART_GENERATION_ENV);
    }

    @Test
    void eachGenerationHasItsOwnRunIdPortAndSecret() {
        LaunchSpec spec = new LaunchSpec("2", 1, 0, "127.0.0.1", 29500, "job7", LaunchSpec.CpuBind.NONE, null, false,
                List.of("app"), 2);
        Map<String, String> env = Map.of("SYMMEM4J_SECRET", "given-secret-of-the-job-0123");
        LaunchPlan first = LaunchPlan.of(spec, EIGHT_CPUS_TWO_GPUS, env, "j", null, "unused");
        Path g2Secret = Path.of("/tmp/x/secret-g2");
        LaunchPlan third = LaunchPlan.of(spec, EIGHT_CPUS_TWO_GPUS, env, "j", g2Secret, "unused", 2);
        assertEquals("job7", first.runId());
        assertEquals("job7-g2", third.runId());
        assertEquals(29502, third.masterPort());
        for (LaunchPlan.RankLaunch r : third.ranks()) {
            assertEquals(new ProcessGroupConfig(r.rank(), 2, r.localRank(), 2, "127.0.0.1", 29502, "job7-g2"),
                    ProcessGroupConfig.fromEnvironment(r.env()));
            assertEquals("2", r.env().get("SYMMEM4J_RESTART_GENERATION"));
            assertEquals("2", r.env().get("TORCHELASTIC_RESTART_COUNT"));
            assertEquals("2", r.env().get("TORCHELASTIC_MAX_RESTARTS"));
            assertEquals(g2Secret.toString(), r.env().get("SYMMEM4J_SECRET_FILE"));
            // the environment's secret would win over the generation's file: blanked, which the runtime reads as unset
            assertNull(Configuration.SECRET.get(Configuration.Source.environment(merged(env, r.env()))));
            assertEquals(g2Secret, Configuration.SECRET_FILE.get(Configuration.Source.environment(merged(env, r.env()))));
            assertEquals(2, Configuration.RESTART_GENERATION.get(Configuration.Source.environment(r.env())));
        }
        LaunchPlan.RankLaunch r0 = first.ranks().getFirst();
        assertEquals("0", r0.env().get("SYMMEM4J_RESTART_GENERATION"));
        assertEquals("0", r0.env().get("TORCHELASTIC_RESTART_COUNT"));
        assertNull(r0.env().get("SYMMEM4J_SECRET"), "generation 0 inherits the environment's secret, as without restarts");
        assertEquals("x".repeat(125) + "-g1", LaunchPlan.generationRunId("x".repeat(128), 1), "cut to fit 128 characters");
        assertEquals("x".repeat(125) + "-g1", JobIdentity.checkRunId(LaunchPlan.generationRunId("x".repeat(128), 1)));
        IllegalArgumentException noSecret = assertThrows(IllegalArgumentException.class,
                () -> LaunchPlan.of(spec, EIGHT_CPUS_TWO_GPUS, env, "j", null, "unused", 1));
        assertTrue(noSecret.getMessage().contains("generation 1 needs a secret of its own"), noSecret.getMessage());
        assertThrows(IllegalArgumentException.class, () -> LaunchPlan.of(spec, EIGHT_CPUS_TWO_GPUS, env, "j", g2Secret,
                "unused", 3));
        LaunchSpec pastTheLastPort = new LaunchSpec("1", 1, 0, "127.0.0.1", 65535, null, LaunchSpec.CpuBind.NONE, null,
                false, List.of("app"), 1);
        IllegalArgumentException port = assertThrows(IllegalArgumentException.class,
                () -> LaunchPlan.of(pastTheLastPort, EIGHT_CPUS_TWO_GPUS, Map.of(), "j", SECRET, "f"));
        assertTrue(port.getMessage().contains("generation g uses port 65535 + g, past 65535"), port.getMessage());
    }

    private static Map<String, String> merged(Map<String, String> inherited, Map<String, String> set) {
        Map<String, String> m = new java.util.HashMap<>(inherited);
        m.putAll(set);
        return m;
    }

    @Test
    void everyProcessGetsWhatAProcessGroupReads() {
        LaunchPlan plan = LaunchPlan.of(oneMachine("4", "app", "--x"), EIGHT_CPUS_TWO_GPUS, Map.of(), "/jdk/bin/java", SECRET,
                "run-1");
        assertEquals(4, plan.worldSize());
        assertEquals(4, plan.localWorldSize());
        for (int r = 0; r < 4; r++) {
            LaunchPlan.RankLaunch l = plan.ranks().get(r);
            ProcessGroupConfig c = ProcessGroupConfig.fromEnvironment(l.env());
            assertEquals(new ProcessGroupConfig(r, 4, r, 4, "127.0.0.1", 29500, "run-1"), c, "rank " + r);
            assertEquals(SECRET.toString(), l.env().get("SYMMEM4J_SECRET_FILE"));
            assertEquals("0", l.env().get("GROUP_RANK"));
            // two CPUs each, contiguous, bound with taskset, and as many OpenMP threads
            assertEquals(List.of(2 * r, 2 * r + 1), l.cpus());
            assertEquals(List.of("/usr/bin/taskset", "-c", (2 * r) + "-" + (2 * r + 1), "app", "--x"), l.command());
            assertEquals("2", l.env().get("OMP_NUM_THREADS"));
        }
        assertTrue(plan.notes().stream().anyMatch(n -> n.contains("4 processes share 2 GPU(s)")), plan.notes().toString());
    }

    @Test
    void secondMachineOfTwoGetsTheUpperRanks() {
        LaunchPlan plan = LaunchPlan.of(spec("gpu", 2, 1, "10.0.0.1", "job7", LaunchSpec.CpuBind.NONE, false, "app"),
                EIGHT_CPUS_TWO_GPUS, Map.of("SYMMEM4J_SECRET", "0123456789abcdef0123"), "/jdk/bin/java", null, "unused");
        assertEquals(4, plan.worldSize());
        assertEquals(List.of(2, 3), plan.ranks().stream().map(LaunchPlan.RankLaunch::rank).toList());
        ProcessGroupConfig c = ProcessGroupConfig.fromEnvironment(plan.ranks().get(1).env());
        assertEquals(new ProcessGroupConfig(3, 4, 1, 2, "10.0.0.1", 29500, "job7"), c);
        assertNull(plan.ranks().get(0).env().get("SYMMEM4J_SECRET_FILE"), "the environment's secret is inherited, not replaced");
        assertNull(plan.ranks().get(0).env().get("OMP_NUM_THREADS"), "unbound: nothing set");
        assertEquals(List.of("app"), plan.ranks().get(0).command());
    }

    @Test
    void javaCommandsRunThisJdkWithSymmemsFlags() {
        LaunchPlan plan = LaunchPlan.of(spec("1", 1, 0, "127.0.0.1", null, LaunchSpec.CpuBind.NONE, true, "-cp", "a.jar", "Main"),
                EIGHT_CPUS_TWO_GPUS, Map.of(), "/jdk/bin/java", SECRET, "run-1");
        assertEquals(List.of("/jdk/bin/java", "--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector",
                "--sun-misc-unsafe-memory-access=allow", "-cp", "a.jar", "Main"), plan.ranks().getFirst().command());
    }

    @Test
    void slicesAreContiguousAndAsEqualAsTheyCome() {
        List<String> notes = new ArrayList<>();
        assertEquals(List.of(List.of(0, 1), List.of(2, 3, 4), List.of(5, 6, 7)),
                LaunchPlan.slices(List.of(0, 1, 2, 3, 4, 5, 6, 7), 3, notes));
        assertTrue(notes.isEmpty());
        assertEquals(List.of(List.of(4), List.of(9), List.of(4)), LaunchPlan.slices(List.of(4, 9), 3, notes));
        assertTrue(notes.getFirst().contains("3 processes on 2 CPU(s) (4,9)"), notes.toString());
    }

    @Test
    void theEnvironmentsOmpThreadsAndRunIdAreKept() {
        LaunchPlan plan = LaunchPlan.of(oneMachine("2", "app"), EIGHT_CPUS_TWO_GPUS,
                Map.of("OMP_NUM_THREADS", "3", "SYMMEM4J_RUN_ID", "mine"), "/jdk/bin/java", SECRET, "fresh");
        assertEquals("mine", plan.runId());
        assertNull(plan.ranks().getFirst().env().get("OMP_NUM_THREADS"), "inherited from the environment, not overridden");
        assertTrue(plan.notes().stream().anyMatch(n -> n.contains("OMP_NUM_THREADS=3")), plan.notes().toString());
    }

    @Test
    void affinityLeavesThePinningToEachProcessAndRefusesCpusTheLauncherMayNotUseBeforeStarting() {
        assertEquals(Configuration.AFFINITY.env(), LaunchPlan.AFFINITY_ENV);
        assertEquals(Configuration.AFFINITY_CPUS.env(), LaunchPlan.AFFINITY_CPUS_ENV);
        LaunchPlan plan = LaunchPlan.of(oneMachine("2", "app"), EIGHT_CPUS_TWO_GPUS,
                Map.of("SYMMEM4J_AFFINITY", "physical-cores"), "/jdk/bin/java", SECRET, "r");
        for (LaunchPlan.RankLaunch r : plan.ranks()) {
            assertEquals(List.of("app"), r.command(), "no taskset slice: the process pins itself when it joins");
            assertEquals("1", r.env().get("OMP_NUM_THREADS"));
        }
        assertTrue(plan.notes().stream().anyMatch(n -> n.contains("pins itself to one CPU")), plan.notes().toString());
        LaunchPlan listed = LaunchPlan.of(oneMachine("2", "app"), EIGHT_CPUS_TWO_GPUS,
                Map.of("SYMMEM4J_AFFINITY_CPUS", "6,2"), "/jdk/bin/java", SECRET, "r");
        assertEquals(List.of("app"), listed.ranks().getFirst().command());
        LaunchPlan off = LaunchPlan.of(oneMachine("2", "app"), EIGHT_CPUS_TWO_GPUS,
                Map.of("SYMMEM4J_AFFINITY", "off"), "/jdk/bin/java", SECRET, "r");
        assertEquals("/usr/bin/taskset", off.ranks().getFirst().command().getFirst());
        IllegalArgumentException outside = assertThrows(IllegalArgumentException.class, () -> LaunchPlan.of(
                oneMachine("2", "app"), EIGHT_CPUS_TWO_GPUS, Map.of("SYMMEM4J_AFFINITY_CPUS", "0,9"), "j", SECRET, "r"));
        assertTrue(outside.getMessage().contains("names cpu=9") && outside.getMessage().contains("fix: name CPUs of 0-7"),
                outside.getMessage());
        IllegalArgumentException few = assertThrows(IllegalArgumentException.class, () -> LaunchPlan.of(
                oneMachine("2", "app"), EIGHT_CPUS_TWO_GPUS, Map.of("SYMMEM4J_AFFINITY_CPUS", "4"), "j", SECRET, "r"));
        assertTrue(few.getMessage().contains("2 processes to pin but 1 CPU(s)"), few.getMessage());
        IllegalArgumentException mode = assertThrows(IllegalArgumentException.class, () -> LaunchPlan.of(
                oneMachine("2", "app"), EIGHT_CPUS_TWO_GPUS, Map.of("SYMMEM4J_AFFINITY", "smt"), "j", SECRET, "r"));
        assertTrue(mode.getMessage().contains("expected=off, cores or physical-cores"), mode.getMessage());
    }

    @Test
    void withoutTasksetNothingIsBoundButThreadsAreSized() {
        Machine noTaskset = new Machine(List.of(0, 1, 2, 3), 0, "test", null);
        LaunchPlan plan = LaunchPlan.of(oneMachine("2", "app"), noTaskset, Map.of(), "/jdk/bin/java", SECRET, "r");
        assertEquals(List.of("app"), plan.ranks().getFirst().command());
        assertTrue(plan.ranks().getFirst().cpus().isEmpty());
        assertEquals("2", plan.ranks().getFirst().env().get("OMP_NUM_THREADS"));
        assertTrue(plan.notes().stream().anyMatch(n -> n.contains("taskset is not on the PATH")), plan.notes().toString());
    }

    @Test
    void theRunIdsTheLauncherAcceptsAreTheRuntimes() {
        for (String id : List.of("run-mwxqyw9u-f7d2b407", "job.7:a@b+c", "x".repeat(128))) {
            assertEquals(id, JobIdentity.checkRunId(id));
            assertEquals(id, LaunchPlan.of(spec("1", 1, 0, "127.0.0.1", id, LaunchSpec.CpuBind.NONE, false, "a"),
                    EIGHT_CPUS_TWO_GPUS, Map.of(), "j", SECRET, "f").runId());
        }
        for (String id : List.of("../etc", "a b", "x".repeat(129))) {
            assertThrows(IllegalArgumentException.class, () -> JobIdentity.checkRunId(id));
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LaunchPlan.of(
                    spec("1", 1, 0, "127.0.0.1", id, LaunchSpec.CpuBind.NONE, false, "a"), EIGHT_CPUS_TWO_GPUS, Map.of(), "j",
                    SECRET, "f"));
            assertTrue(e.getMessage().contains("run id '" + id + "'"), e.getMessage());
        }
    }

    @Test
    void badRequestsSayWhatWasExpected() {
        Map<String, String> env = Map.of();
        assertRefused("--nproc-per-node=zero: expected a number >= 1", oneMachine("zero", "a"), EIGHT_CPUS_TWO_GPUS, env);
        assertRefused("--nproc-per-node gpu: no GPU found", oneMachine("gpu", "a"),
                new Machine(List.of(0), 0, "CUDA_VISIBLE_DEVICES=", null), env);
        assertRefused("no command to start", oneMachine("2"), EIGHT_CPUS_TWO_GPUS, env);
        assertRefused("--node-rank=2 outside [0, --nnodes=2)",
                spec("1", 2, 2, "10.0.0.1", "j", LaunchSpec.CpuBind.NONE, false, "a"), EIGHT_CPUS_TWO_GPUS, env);
        assertRefused("cannot reach a loopback address",
                spec("1", 2, 0, "127.0.0.1", "j", LaunchSpec.CpuBind.NONE, false, "a"), EIGHT_CPUS_TWO_GPUS, env);
        assertRefused("without --run-id",
                spec("1", 2, 0, "10.0.0.1", null, LaunchSpec.CpuBind.NONE, false, "a"), EIGHT_CPUS_TWO_GPUS, env);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LaunchPlan.needsGeneratedSecret(
                spec("1", 2, 0, "10.0.0.1", "j", LaunchSpec.CpuBind.NONE, false, "a"), env));
        assertTrue(e.getMessage().contains("--nnodes=2 without a secret") && e.getMessage().contains("--secret-file"),
                e.getMessage());
        assertTrue(LaunchPlan.needsGeneratedSecret(oneMachine("1", "a"), env));
        assertFalse(LaunchPlan.needsGeneratedSecret(oneMachine("1", "a"), Map.of("SYMMEM4J_SECRET_FILE", "/s")));
    }

    /** torchrun's elastic spelling for this machine's processes: MIN:MAX, checked before anything starts. */
    @Test
    void anElasticRangeStartsWithMaxAndBadRangesSayWhatWasExpected() {
        Map<String, String> env = Map.of();
        LaunchSpec elastic = new LaunchSpec("2:3", 1, 0, "127.0.0.1", 29500, null, LaunchSpec.CpuBind.NONE, null, false,
                List.of("a"), 2);
        assertEquals(3, LaunchPlan.of(elastic, EIGHT_CPUS_TWO_GPUS, env, "j", SECRET, "f").ranks().size(), "MAX first");
        LaunchPlan fewer = LaunchPlan.of(elastic, EIGHT_CPUS_TWO_GPUS, env, "j", SECRET, "f", 2, 2);
        assertEquals(2, fewer.worldSize());
        assertEquals("2", fewer.ranks().getLast().env().get("WORLD_SIZE"));
        IllegalArgumentException below = assertThrows(IllegalArgumentException.class,
                () -> LaunchPlan.of(elastic, EIGHT_CPUS_TWO_GPUS, env, "j", SECRET, "f", 2, 1));
        assertTrue(below.getMessage().contains("generation 2 with 1 processes: outside --nproc-per-node=2:3 [2, 3]"),
                below.getMessage());
        assertRefused("--nproc-per-node=3:2: expected MIN:MAX with 1 <= MIN <= MAX, found MIN=3 MAX=2 (fix: e.g."
                + " --nproc-per-node 2:3)", oneMachine("3:2", "a"), EIGHT_CPUS_TWO_GPUS, env);
        assertRefused("--nproc-per-node=0:2: expected MIN:MAX with 1 <= MIN <= MAX, found MIN=0 MAX=2",
                oneMachine("0:2", "a"), EIGHT_CPUS_TWO_GPUS, env);
        assertRefused("--nproc-per-node=gpu:4: expected MIN:MAX, two whole numbers", oneMachine("gpu:4", "a"),
                EIGHT_CPUS_TWO_GPUS, env);
        assertRefused("--nproc-per-node=2:: expected MIN:MAX, two whole numbers", oneMachine("2:", "a"),
                EIGHT_CPUS_TWO_GPUS, env);
        assertRefused("--nproc-per-node=1:4 without --max-restarts: the job goes on with fewer processes only when it"
                + " restarts", oneMachine("1:4", "a"), EIGHT_CPUS_TWO_GPUS, env);
        assertRefused("--nproc-per-node=1:4 with --nnodes 2: a range of processes is for one machine here",
                new LaunchSpec("1:4", 2, 0, "10.0.0.1", 29500, "j", LaunchSpec.CpuBind.NONE, null, false, List.of("a"), 1),
                EIGHT_CPUS_TWO_GPUS, env);
        assertEquals(2, LaunchPlan.of(oneMachine("2:2", "a"), EIGHT_CPUS_TWO_GPUS, env, "j", SECRET, "f").ranks().size(),
                "MIN = MAX: a fixed count, no restarts needed");
    }

    /**
     * An elastic job of machines: the rendezvous' assignment places this machine's ranks; loopback is allowed (a
     * rendezvous on loopback can only be reached from this machine: every node is local), as it is not for a fixed
     * {@code --nnodes > 1}.
     */
    @Test
    void anElasticJobOfMachinesPlansTheAssignedNodeOnLoopback() {
        LaunchSpec elastic = new LaunchSpec("2", 3, 0, "127.0.0.1", 29500, "j", LaunchSpec.CpuBind.NONE, null, false,
                List.of("a"), 1, 2);
        assertEquals(29502, NodeRendezvous.port(elastic), "after the store ports 29500, 29501");
        LaunchPlan plan = LaunchPlan.of(elastic.withNodes(2, 1), EIGHT_CPUS_TWO_GPUS, Map.of(), "j", SECRET, "f", 1);
        assertEquals(4, plan.worldSize());
        assertEquals(List.of(2, 3), plan.ranks().stream().map(LaunchPlan.RankLaunch::rank).toList());
        assertEquals("1", plan.ranks().getFirst().env().get("GROUP_RANK"));
        assertEquals("j-g1", plan.runId());
        assertEquals(29501, plan.masterPort());
        assertRefused("cannot reach a loopback address",
                spec("1", 2, 0, "127.0.0.1", "j", LaunchSpec.CpuBind.NONE, false, "a"), EIGHT_CPUS_TWO_GPUS, Map.of());
        assertEquals(2, LaunchPlan.nodeRange("2:3")[0]);
        assertEquals(3, LaunchPlan.nodeRange(" 2 : 3 ")[1]);
    }

    private static void assertRefused(String expected, LaunchSpec spec, Machine machine, Map<String, String> env) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> LaunchPlan.of(spec, machine, env, "j", SECRET, "f"));
        assertTrue(e.getMessage().contains(expected), e.getMessage());
    }
}
