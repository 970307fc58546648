package org.symmem4j.parallel.affinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.CpuList;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * {@link RankAffinity}: the plan from the settings (bad ones fail before anything starts, with the fix), and the
 * pinning really applied on this machine ({@code sched_getaffinity} after pinning answers the rank's CPU alone).
 */
class RankAffinityTest {

    private static Configuration.Source settings(Map<String, String> properties) {
        return new Configuration.Source(properties::get, name -> null, message -> { });
    }

    private static BitSet of(int... cpus) {
        BitSet b = new BitSet();
        for (int c : cpus) {
            b.set(c);
        }
        return b;
    }

    private static void assumeLinux() {
        assumeTrue(CpuAffinity.unsupportedReason().isEmpty(), () -> CpuAffinity.unsupportedReason().get());
    }

    @Test
    void aCpuListNamingACpuTheProcessMayNotUseFailsNamingItAndTheFix() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RankAffinity.plan(RankAffinity.Mode.CORES, List.of(0, 5), 2, null, of(0, 1)));
        assertTrue(e.getMessage().contains("names cpu=5, which this process may not use: allowed=0-1")
                && e.getMessage().contains("fix: name CPUs of 0-1"), e.getMessage());
    }

    @Test
    void onThisMachineACpuOutsideTheAllowedSetFailsBeforeAnyRankStarts() {
        assumeLinux();
        int outside = CpuAffinity.allowedCpus().length() + 7;
        Configuration.Source s = settings(Map.of("symmem4j.affinity.cpus", "0," + outside));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> RankAffinity.fromConfiguration(2, s));
        assertTrue(e.getMessage().contains("names cpu=" + outside) && e.getMessage().contains("fix:"), e.getMessage());
        // and the in-JVM world checks it before it starts a rank thread
        String old = System.getProperty("symmem4j.affinity.cpus");
        System.setProperty("symmem4j.affinity.cpus", "0," + outside);
        try {
            AtomicInteger started = new AtomicInteger();
            InJvmWorld world = InJvmWorld.create(2, GroupOptions.defaults());
            assertThrows(IllegalArgumentException.class, () -> InJvmWorld.runOnEveryRank(world, g -> started.incrementAndGet()));
            assertEquals(0, started.get());
        } finally {
            restore("symmem4j.affinity.cpus", old);
        }
    }

    @Test
    void moreRanksThanCpusAndAListWithOffAndAMalformedListFail() {
        IllegalArgumentException more = assertThrows(IllegalArgumentException.class,
                () -> RankAffinity.plan(RankAffinity.Mode.CORES, null, 3, null, of(0, 1)));
        assertTrue(more.getMessage().contains("3 ranks to pin but 2 CPU(s)") && more.getMessage().contains("fix:"),
                more.getMessage());
        IllegalArgumentException off = assertThrows(IllegalArgumentException.class,
                () -> RankAffinity.fromConfiguration(1, settings(Map.of("symmem4j.affinity", "off",
                        "symmem4j.affinity.cpus", "0"))));
        assertTrue(off.getMessage().contains("fix:"), off.getMessage());
        IllegalArgumentException list = assertThrows(IllegalArgumentException.class,
                () -> RankAffinity.fromConfiguration(1, settings(Map.of("symmem4j.affinity.cpus", "0,0"))));
        assertTrue(list.getMessage().startsWith("invalid setting: -Dsymmem4j.affinity.cpus=0,0"), list.getMessage());
        IllegalArgumentException mode = assertThrows(IllegalArgumentException.class,
                () -> RankAffinity.fromConfiguration(1, settings(Map.of("symmem4j.affinity", "hyperthreads"))));
        assertTrue(mode.getMessage().contains("expected=`off`, `cores`, `physical-cores`"), mode.getMessage());
    }

    @Test
    void plansFollowTheListOrderOrTheModesOrder() throws Exception {
        RankAffinity listed = RankAffinity.plan(RankAffinity.Mode.CORES, List.of(6, 2, 4), 3, null, of(2, 4, 6));
        assertEquals(List.of(6, 2, 4), List.of(listed.cpuOf(0), listed.cpuOf(1), listed.cpuOf(2)));
        CpuTopology smt = CpuTopology.of(List.of(new CpuTopology.Cpu(0, 0, 0, List.of(0, 1)),
                new CpuTopology.Cpu(1, 0, 0, List.of(0, 1)), new CpuTopology.Cpu(2, 0, 1, List.of(2, 3)),
                new CpuTopology.Cpu(3, 0, 1, List.of(2, 3))));
        RankAffinity physical = RankAffinity.plan(RankAffinity.Mode.PHYSICAL_CORES, null, 2, smt, of(0, 1, 2, 3));
        assertEquals(List.of(0, 2), List.of(physical.cpuOf(0), physical.cpuOf(1)));
        RankAffinity cores = RankAffinity.plan(RankAffinity.Mode.CORES, null, 2, smt, of(0, 1, 2, 3));
        assertEquals(List.of(0, 1), List.of(cores.cpuOf(0), cores.cpuOf(1)));
        RankAffinity over = RankAffinity.plan(RankAffinity.Mode.PHYSICAL_CORES, null, 3, smt, of(0, 1, 2, 3));
        assertTrue(over.toString().contains("3 ranks on 2 physical cores"), over.toString());
        assertSame(RankAffinity.OFF, RankAffinity.fromConfiguration(4, settings(Map.of())));
        assertFalse(RankAffinity.OFF.enabled());
    }

    @Test
    void aPinnedThreadIsAllowedItsCpuAloneAndRunsThere() throws Exception {
        assumeLinux();
        BitSet allowed = CpuAffinity.allowedCpus();
        int last = allowed.length() - 1;
        RankAffinity plan = RankAffinity.plan(RankAffinity.Mode.CORES, List.of(last), 1, null, allowed);
        AtomicReference<BitSet> after = new AtomicReference<>();
        AtomicInteger ranOn = new AtomicInteger(-2);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Thread t = Thread.ofPlatform().start(() -> {
            try {
                plan.pinCurrentThread(0);
                after.set(CpuAffinity.allowedCpus());
                ranOn.set(CpuAffinity.currentCpu());
            } catch (Throwable e) {
                failure.set(e);
            }
        });
        t.join();
        assertEquals(null, failure.get());
        assertEquals(of(last), after.get());
        assertEquals(last, ranOn.get());
        assertEquals(allowed, CpuAffinity.allowedCpus(), "the calling thread's mask is untouched");
    }

    @Test
    void theInJvmWorldPinsEachRankThreadToItsCpu() {
        assumeLinux();
        BitSet allowed = CpuAffinity.allowedCpus();
        assumeTrue(allowed.cardinality() >= 2, "needs 2 allowed CPUs");
        List<Integer> cpus = allowed.stream().boxed().toList();
        for (String mode : List.of("cores", "physical-cores")) {
            String old = System.getProperty("symmem4j.affinity");
            System.setProperty("symmem4j.affinity", mode);
            try {
                RankAffinity plan = RankAffinity.fromConfiguration(2);
                List<BitSet> seen = InJvmWorld.runOnEveryRank(InJvmWorld.create(2, GroupOptions.defaults()),
                        g -> CpuAffinity.allowedCpus());
                List<BitSet> expected = new ArrayList<>();
                for (int r = 0; r < 2; r++) {
                    assertTrue(cpus.contains(plan.cpuOf(r)));
                    expected.add(of(plan.cpuOf(r)));
                }
                assertEquals(expected, seen, mode + ": " + plan);
                assertFalse(plan.cpuOf(0) == plan.cpuOf(1));
            } finally {
                restore("symmem4j.affinity", old);
            }
        }
    }

    @Test
    void pinningTheWholeProcessReachesEveryThread() {
        assumeLinux();
        BitSet allowed = CpuAffinity.allowedCpus();
        // to the mask every thread has already: this test must not confine the JVM that runs the other tests
        int threads = CpuAffinity.pinProcess(allowed);
        assertTrue(threads >= Thread.activeCount(), "pinned " + threads + " threads, Java alone has " + Thread.activeCount());
        assertEquals(allowed, CpuAffinity.allowedCpus());
        assertEquals(CpuList.format(allowed), CpuList.format(CpuAffinity.allowedCpus()));
    }

    private static void restore(String property, String old) {
        if (old == null) {
            System.clearProperty(property);
        } else {
            System.setProperty(property, old);
        }
    }
}
