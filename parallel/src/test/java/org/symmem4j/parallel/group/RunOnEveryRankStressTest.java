package org.symmem4j.parallel.group;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.symmem4j.parallel.GroupOptions;

/**
 * {@link InJvmWorld#runOnEveryRank} must never report a hang for ranks that all finished. On JDK 25
 * {@code Thread.join(Duration)} can return {@code true} (the thread terminated) while
 * {@code isAlive()} read right after still says {@code true}; a caller that trusts {@code isAlive()}
 * over {@code join}'s answer threw "rank N still running after PT4M30S … this is a bug" in about 1 of
 * 10,000 calls. Many short calls of four ranks (80,000 joins) make that window near certain: the
 * version that read {@code isAlive()} failed here within 21 s on a 2-core machine.
 */
class RunOnEveryRankStressTest {

    private static final int CALLS = 20_000;

    @Test
    @Timeout(value = 5, unit = TimeUnit.MINUTES)
    void noFalseHangOverManyShortCalls() {
        GroupOptions options = GroupOptions.defaults();
        for (int call = 0; call < CALLS; call++) {
            int expected = call;
            List<Integer> results = InJvmWorld.runOnEveryRank(4, options, group -> expected * 10 + group.rank());
            assertEquals(List.of(expected * 10, expected * 10 + 1, expected * 10 + 2, expected * 10 + 3), results,
                    "call " + call);
        }
    }
}
