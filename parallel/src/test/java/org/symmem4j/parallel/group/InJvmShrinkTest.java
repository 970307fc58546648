package org.symmem4j.parallel.group;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;

/**
 * In-place shrink of a world of threads ({@link InJvmWorld#createShrinking}): the world names as dead the ranks whose
 * tasks threw, and the survivors join a new world of their own, numbered densely in their old order; a mesh over it
 * drops the dead rank's whole slice.
 */
class InJvmShrinkTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    /** Every rank's {@code value}, in the group's rank order. */
    private static List<Integer> gather(Group group, String tag, int value) {
        return group.allGatherBytes(tag, new byte[] {(byte) value}).stream().map(b -> (int) b[0]).toList();
    }

    /** Rank {@code dies} of {@code group} fails an exchange's set-up for everyone by throwing before it. */
    private static void failingExchange(Group group, int dies) {
        if (group.rank() == dies) {
            throw new IllegalStateException("injected: rank " + dies + " dies");
        }
        assertThrows(PeerTimeoutException.class, () -> gather(group, "step", group.rank()));
    }

    @Test
    void theSurvivorsOfAFailedTaskFormANewWorldInTheirOldOrder() {
        RankOutcomes<String> outcomes;
        try (InJvmWorld world = InJvmWorld.createShrinking(4, OPTIONS)) {
            outcomes = InJvmWorld.runOnEveryRankSurviving(world, group -> {
                assertTrue(group.canShrink());
                failingExchange(group, 1);
                Group.Survivors s = group.shrink();
                assertEquals(List.of(1), s.dead());
                assertEquals(List.of(), s.leaving());
                try (Group next = s.group()) {
                    assertTrue(group.abortState().isRaised(), "the old group is aborted: its close waits for nobody");
                    assertEquals(3, next.worldSize());
                    assertTrue(next.canShrink(), "the survivors' world can shrink again");
                    List<Integer> all = gather(next, "after", group.rank());
                    return next.rank() + ":" + all;
                }
            });
        }
        // the survivors 0, 2, 3 are ranks 0, 1, 2 of the new world, and exchange in that order
        assertEquals(java.util.Map.of(0, "0:[0, 2, 3]", 2, "1:[0, 2, 3]", 3, "2:[0, 2, 3]"), outcomes.survivorResults());
        assertEquals(List.of(0, 2, 3), outcomes.survivors());
        assertEquals(List.of(1), outcomes.dead());
        assertEquals(4, outcomes.worldSize());
        assertTrue(outcomes.failure(1).getMessage().contains("injected: rank 1 dies"), String.valueOf(outcomes.failure(1)));
        assertNull(outcomes.failure(2));
        assertEquals(List.of(1), List.copyOf(outcomes.failures().keySet()));
        assertEquals("1:[0, 2, 3]", outcomes.result(2));
        IllegalArgumentException noResult = assertThrows(IllegalArgumentException.class, () -> outcomes.result(1));
        assertTrue(noResult.getMessage().contains("rank=1 has no result") && noResult.getMessage().contains("fix:"),
                noResult.getMessage());
        assertThrows(IllegalArgumentException.class, () -> outcomes.failure(4));
        // what runOnEveryRank throws: the first dead rank's failure
        SymmemException e = assertThrows(SymmemException.class, outcomes::orThrow);
        assertTrue(e.getMessage().startsWith("rank 1 failed") && e.getCause().getMessage().contains("injected"),
                e.getMessage());
    }

    @Test
    void withoutADeadRankTheOutcomesAreEveryResult() {
        try (InJvmWorld world = InJvmWorld.createShrinking(3, OPTIONS)) {
            RankOutcomes<Integer> outcomes = InJvmWorld.runOnEveryRankSurviving(world, group -> 10 * group.rank());
            assertEquals(List.of(0, 10, 20), outcomes.orThrow());
            assertEquals(List.of(), outcomes.dead());
            assertEquals(java.util.Map.of(), outcomes.failures());
        }
    }

    @Test
    void aMeshDropsTheDeadRanksSliceAndItsLiveRanksLeaveAndASecondShrinkNamesTheFirstWorldsRanks() {
        RankOutcomes<String> seen;
        try (InJvmWorld world = InJvmWorld.createShrinking(6, OPTIONS)) {
            seen = InJvmWorld.runOnEveryRankSurviving(world, group -> {
                try (DeviceMesh mesh = DeviceMesh.of(group, "dp", 3, "tp", 2)) {
                    failingExchange(group, 3); // dp 1 tp 1: its tp peer, world rank 2, leaves with it
                    DeviceMesh.Shrunk s = mesh.shrink("dp");
                    assertEquals(List.of(3), s.dead());
                    assertEquals(List.of(1), s.lostCoordinates());
                    if (s.left()) {
                        return "left";
                    }
                    try (DeviceMesh next = s.mesh(); Group nextWorld = next.group()) {
                        assertEquals(2, next.size("dp"));
                        assertEquals(mesh.coordinate("tp"), next.coordinate("tp"), "each keeps its tp coordinate");
                        List<Integer> tp = gather(next.group("tp"), "tp", group.rank());
                        // a second death, in the survivors' world: its rank 0 (first-world rank 0) dies
                        failingExchange(nextWorld, 0);
                        Group.Survivors again = nextWorld.shrink();
                        assertEquals(List.of(0), again.dead());
                        try (Group last = again.group()) {
                            return next.coordinate("dp") + "/" + next.coordinate("tp") + " tp " + tp + " then "
                                    + last.rank() + " of " + last.worldSize();
                        }
                    }
                }
            });
        }
        assertEquals(List.of(0, 3), seen.dead(), "rank 3 died in the first world, rank 0 in the survivors'");
        assertEquals(java.util.Map.of(1, "0/1 tp [0, 1] then 0 of 3", 2, "left", 4, "1/0 tp [4, 5] then 1 of 3",
                5, "1/1 tp [4, 5] then 2 of 3"), seen.survivorResults());
    }

    @Test
    void aWorldNotCreatedShrinkingAndASubGroupCannotShrinkAndSayHow() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            assertFalse(group.canShrink());
            UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class, group::shrink);
            assertTrue(e.getMessage().contains("InJvmWorld.createShrinking"), e.getMessage());
            return null;
        });
        try (InJvmWorld world = InJvmWorld.createShrinking(2, OPTIONS)) {
            InJvmWorld.runOnEveryRank(world, group -> {
                try (Group sub = group.split(0, group.rank(), "all")) {
                    assertFalse(sub.canShrink());
                }
                return null;
            });
        }
    }

    @Test
    void aShrinkWithNoDeadRankFailsAfterTheTimeoutNamingWhatItExpected() {
        try (InJvmWorld world = InJvmWorld.createShrinking(1, GroupOptions.defaults()
                .withTimeout(Duration.ofMillis(300)))) {
            InJvmWorld.runOnEveryRank(world, group -> {
                SymmemException e = assertThrows(SymmemException.class, group::shrink);
                assertTrue(e.getMessage().contains("no rank of it failed within timeout=")
                        && e.getMessage().contains("fix: call shrink() after a peer's task failed"), e.getMessage());
                return null;
            });
        }
    }
}
