package org.symmem4j.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@code symmem4j-run --on-failure shrink} with real processes ({@code sh} programs): a failed rank stops nobody, the
 * others read its death in the membership file, and the job's status is the survivors'. No timing is asserted.
 */
class ShrinkModeTest {

    /** Rank 1 exits 3 at once; ranks 0 and 2 wait (bounded) until the membership file names it, print it, exit 0. */
    private static final String RANK_1_DIES = "if [ \"$RANK\" = 1 ]; then echo dying; exit 3; fi;"
            + " i=0; while ! grep -q '^dead 1 ' \"$SYMMEM4J_MEMBERSHIP_FILE\"; do i=$((i+1));"
            + " if [ $i -gt 600 ]; then echo 'never announced'; exit 9; fi; sleep 0.1; done;"
            + " echo \"saw: $(cat \"$SYMMEM4J_MEMBERSHIP_FILE\") mode=$(stat -c %a \"$(dirname \"$SYMMEM4J_MEMBERSHIP_FILE\")\")\"";

    @Test
    @Timeout(120)
    void aFailedRankIsAnnouncedAndTheOthersGoOnToExitZero() {
        Launcher.Result r = LauncherTest.launch("-n", "3", "--cpu-bind", "none", "--on-failure", "shrink", "--", "sh",
                "-c", RANK_1_DIES);
        assertEquals(0, r.status(), r.err() + "\n" + r.out());
        for (int rank : new int[] {0, 2}) {
            assertTrue(r.out().contains("[rank " + rank + "] saw: dead 1 exited with code 3 mode=700"), r.out());
        }
        assertTrue(r.err().contains("rank 1 (local rank 1, pid ") && r.err().contains("exited with code 3")
                && r.err().contains("--on-failure shrink: the other ranks go on without it"), r.err());
        assertTrue(r.err().contains("2 of 3 ranks exited 0") && r.err().contains("died: rank 1 "), r.err());
        assertTrue(r.err().contains("on failure the others go on without the dead rank"), r.err());
    }

    @Test
    @Timeout(120)
    void whenNoRankExitsZeroTheJobFailsWithTheFirstFailedCode() {
        Launcher.Result r = LauncherTest.launch("-n", "2", "--cpu-bind", "none", "--on-failure", "shrink", "--", "sh",
                "-c", "if [ \"$RANK\" = 1 ]; then exit 5; fi; sleep 1; exit 6");
        assertEquals(5, r.status(), r.err());
        assertTrue(r.err().contains("no rank exited 0 (--on-failure shrink)"), r.err());
    }

    @Test
    void withoutShrinkThereIsNoMembershipFile() {
        Launcher.Result r = LauncherTest.launch("-n", "1", "--cpu-bind", "none", "--", "sh", "-c",
                "echo \"membership=[${SYMMEM4J_MEMBERSHIP_FILE}]\"");
        assertEquals(0, r.status(), r.err());
        assertTrue(r.out().contains("membership=[]"), r.out());
    }

    @Test
    void shrinkIsRefusedWithRestartsSeveralMachinesAndUnknownModes() {
        Launcher.Result restarts = LauncherTest.launch("-n", "2", "--on-failure", "shrink", "--max-restarts", "1", "--",
                "true");
        assertEquals(2, restarts.status());
        assertTrue(restarts.err().contains("--on-failure shrink with --max-restarts 1"), restarts.err());
        Launcher.Result nodes = LauncherTest.launch("-n", "2", "--on-failure", "shrink", "--nnodes", "2", "--node-rank",
                "0", "--run-id", "j", "--secret-file", "/nonexistent", "--", "true");
        assertEquals(2, nodes.status());
        assertTrue(nodes.err().contains("--on-failure shrink with --nnodes 2"), nodes.err());
        Launcher.Result range = LauncherTest.launch("-n", "2:3", "--on-failure", "shrink", "--", "true");
        assertEquals(2, range.status());
        assertTrue(range.err().contains("--on-failure shrink with --nproc-per-node 2:3: a shrinking job already goes on"
                + " with fewer processes, in place; a range is for restarts") && range.err().contains("(fix:"
                + " --nproc-per-node 3, or --on-failure stop with --max-restarts)"), range.err());
        Launcher.Result unknown = LauncherTest.launch("-n", "1", "--on-failure", "restart", "--", "true");
        assertEquals(2, unknown.status());
        assertTrue(unknown.err().contains("--on-failure=restart: expected stop or shrink"), unknown.err());
        assertFalse(unknown.out().contains("[rank 0]"), "nothing started");
    }
}
