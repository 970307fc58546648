package org.symmem4j.parallel.tensor;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.tensor.FullyShardedMlp.Adam;
import org.symmem4j.parallel.tensor.FullyShardedMlp.Sharding;

/**
 * What {@link ShrinkingMlp} refuses before anything collective, where there is no GPU (CI): SHRINK with
 * {@link Sharding#FULL} (no checkpoint to go back to), a bad {@code minRanks}, and a group that cannot shrink in place
 * (threads of one JVM: no launcher names the dead). The shrink itself is {@code CudaShrinkTest}'s (GPU).
 */
class ShrinkingMlpHostTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));
    private static final int[] WIDTHS = {16, 32, 8};

    @Test
    void refusesFullShardingBadMinRanksAndGroupsThatCannotShrink() {
        List<String[]> messages = InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            assertFalse(group.canShrink());
            String full = assertThrows(IllegalArgumentException.class, () -> ShrinkingMlp.create(group, 8, WIDTHS,
                    Sharding.FULL, Adam.defaults(), 1)).getMessage();
            String min = assertThrows(IllegalArgumentException.class, () -> ShrinkingMlp.create(group, 8, WIDTHS,
                    Sharding.NONE, Adam.defaults(), 3)).getMessage();
            String zero = assertThrows(IllegalArgumentException.class, () -> ShrinkingMlp.create(group, 8, WIDTHS,
                    Sharding.NONE, Adam.defaults(), 0)).getMessage();
            String cannot = assertThrows(IllegalArgumentException.class, () -> ShrinkingMlp.create(group, 8, WIDTHS,
                    Sharding.NONE, Adam.defaults(), 1)).getMessage();
            return new String[] {full, min, zero, cannot};
        });
        for (String[] m : messages) {
            assertTrue(m[0].contains("Sharding.FULL") && m[0].contains("no checkpoint") && m[0].contains("fix:"), m[0]);
            assertTrue(m[1].contains("minRanks=3") && m[1].contains("worldSize=2") && m[1].contains("fix:"), m[1]);
            assertTrue(m[2].contains("minRanks=0"), m[2]);
            assertTrue(m[3].contains("cannot shrink in place") && m[3].contains("--on-failure shrink")
                    && m[3].contains("fix:"), m[3]);
        }
    }
}
