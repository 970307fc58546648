package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * {@link ParameterCacheExample}: rank 0 hot-swaps two adapters while the other ranks serve from zero-copy views, as
 * threads and as launched processes; every serving rank ends on the last versions, and the third name evicts the least
 * recently used adapter. Its torn-read check finds a view that mixes two versions.
 */
class ParameterCacheExampleTest {

    private static final ParameterCacheExample.Settings SMALL = new ParameterCacheExample.Settings(50, 256, 100);

    @Test
    void threeRankThreadsServeEverySwapWholeAndEndOnTheLastVersions() {
        List<ParameterCacheExample.Outcome> outcomes = InJvmWorld.runOnEveryRank(3, GroupOptions.defaults(),
                group -> ParameterCacheExample.run(group, SMALL));
        ParameterCacheExample.Outcome o = outcomes.getFirst();
        assertEquals(outcomes.get(0), outcomes.get(1), "every rank returns the exchanged outcome");
        assertEquals(outcomes.get(0), outcomes.get(2));
        assertEquals(2, o.servers());
        assertEquals(2 * (50 + 1), o.versionsPut(), "the first version and 50 swaps of each adapter");
        // the owner's versions count its puts from 1, a and b in turn: the last swap put 101 (a) and 102 (b)
        assertEquals(List.of(101L, 102L), o.finalVersions());
        assertTrue(o.switches() >= 2 * 2, "each serving rank took at least one version of each adapter: " + o);
        assertTrue(o.switches() <= o.servers() * o.versionsPut(), "no serving rank takes a version twice: " + o);
        assertTrue(o.requests() >= 2 * ParameterCacheExample.BATCH, "every serving rank answered a batch at least: "
                + o);
        assertTrue(o.maxSwitchNanos() > 0 && o.meanSwitchNanos() <= o.maxSwitchNanos(), o.toString());
        assertEquals("adapter/a", o.evicted());
        assertTrue(o.line().contains("rank 0 swapped 102 versions of 2 adapters x 256 floats while 2 serving rank(s)"),
                o.line());
    }

    @Test
    void theTornReadCheckFindsTheFirstWeightOfAnotherVersion() {
        int size = 300;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment entry = arena.allocate(ParameterCacheExample.WEIGHTS + 4L * size, 8);
            ParameterCacheExample.fill(entry, 1, 7, size);
            assertEquals(-1, ParameterCacheExample.firstForeignWeight(entry, 1, size));
            assertEquals(0, ParameterCacheExample.firstForeignWeight(entry, 0, size), "adapter a's weights differ");
            for (int i = 120; i < size; i++) { // the tail of swap 8 over swap 7's head: a torn read
                entry.set(ValueLayout.JAVA_FLOAT, ParameterCacheExample.WEIGHTS + 4L * i,
                        ParameterCacheExample.weight(1, 8, i));
            }
            assertEquals(120, ParameterCacheExample.firstForeignWeight(entry, 1, size));
        }
    }

    private static final Pattern LINE = Pattern.compile("\\[rank 0\\] parameter cache: rank 0 swapped (\\d+) versions"
            + " of 2 adapters x (\\d+) floats while (\\d+) serving rank\\(s\\) answered (\\d+) requests.*every"
            + " serving rank ended on the last versions \\[(\\d+), (\\d+)\\].*putting adapter/c evicted adapter/a");

    @Test
    void threeLaunchedProcessesServeEverySwapAndEvictTheLeastRecentlyUsed() throws IOException {
        String out = LaunchedJvm.launchRanksReportingFromRankZero(3, "128m", ParameterCacheExample.class,
                List.of("--swaps", "50", "--size", "256", "--interval-us", "100"), "parameter cache");
        Matcher m = LINE.matcher(out);
        assertTrue(m.find(), "rank 0 prints the result: " + out);
        assertEquals("102", m.group(1));
        assertEquals("256", m.group(2));
        assertEquals("2", m.group(3), "ranks 1 and 2 serve");
        assertTrue(Long.parseLong(m.group(4)) >= 2 * ParameterCacheExample.BATCH, out);
        assertEquals(List.of("101", "102"), List.of(m.group(5), m.group(6)));
    }
}
