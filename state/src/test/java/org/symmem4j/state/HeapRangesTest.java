package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

import org.junit.jupiter.api.Test;

/**
 * The parameter caches' free heap ranges against a byte-map model: random takes and gives never hand out a byte that
 * is taken, and a take fails only when no free run of the model is long enough.
 */
class HeapRangesTest {

    @Test
    void randomTakesAndGivesNeverHandOutATakenByteAndFailOnlyWhenNoRunFits() {
        int heap = 64 * 256;
        for (long seed = 1; seed <= 20; seed++) {
            Random random = new Random(seed);
            HeapRanges ranges = new HeapRanges(heap);
            boolean[] taken = new boolean[heap / 64];
            List<long[]> live = new ArrayList<>();
            for (int step = 0; step < 3_000; step++) {
                if (!live.isEmpty() && random.nextInt(3) == 0) {
                    long[] block = live.remove(random.nextInt(live.size()));
                    ranges.give(block[0], block[1]);
                    for (long b = block[0]; b < block[0] + block[1]; b += 64) {
                        taken[(int) (b / 64)] = false;
                    }
                    continue;
                }
                long bytes = 64L * (1 + random.nextInt(random.nextBoolean() ? 4 : 24));
                long off = ranges.take(bytes);
                if (off < 0) {
                    assertTrue(longestFreeRun(taken) * 64L < bytes, "seed " + seed + " step " + step
                            + ": take of bytes=" + bytes + " failed with a free run of " + longestFreeRun(taken) * 64L);
                    continue;
                }
                assertEquals(0, off % 64, "aligned");
                assertTrue(off + bytes <= heap, "inside the heap");
                for (long b = off; b < off + bytes; b += 64) {
                    assertFalse(taken[(int) (b / 64)], "seed " + seed + " step " + step + ": byte " + b
                            + " handed out twice (take of bytes=" + bytes + " at " + off + ")");
                    taken[(int) (b / 64)] = true;
                }
                live.add(new long[] {off, bytes});
            }
        }
    }

    private static int longestFreeRun(boolean[] taken) {
        int best = 0;
        int run = 0;
        for (boolean t : taken) {
            run = t ? 0 : run + 1;
            best = Math.max(best, run);
        }
        return best;
    }
}
