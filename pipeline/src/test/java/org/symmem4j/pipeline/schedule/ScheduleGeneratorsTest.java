package org.symmem4j.pipeline.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

class ScheduleGeneratorsTest {

    /** A golden file without its comment and blank lines: exactly what {@link Schedule#toText()} writes. */
    private static String golden(String name) throws IOException {
        try (InputStream in = ScheduleGeneratorsTest.class.getResourceAsStream("/golden/" + name)) {
            assertNotNull(in, "missing test resource golden/" + name);
            String text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
            return text.lines()
                    .filter(line -> !line.isBlank() && !line.strip().startsWith("#"))
                    .map(line -> line + "\n")
                    .collect(Collectors.joining());
        }
    }

    private static void assertMatchesGolden(String name, Schedule generated) throws IOException {
        String expected = golden(name);
        assertEquals(expected, generated.toText(), "generator output differs from golden/" + name);
        assertEquals(Schedule.parse(expected), generated);
    }

    @Test
    void gpipeMatchesGolden() throws IOException {
        assertMatchesGolden("gpipe-p2-m4.txt", ScheduleGenerators.gpipe(2, 4));
    }

    @Test
    void oneFOneBMatchesHandWrittenTextbookGolden() throws IOException {
        assertMatchesGolden("1f1b-p4-m8.txt", ScheduleGenerators.oneFOneB(4, 8));
    }

    @Test
    void interleavedMatchesGolden() throws IOException {
        assertMatchesGolden("interleaved-p2-m4-v2.txt", ScheduleGenerators.interleavedOneFOneB(2, 4, 2));
        assertMatchesGolden("interleaved-p4-m8-v2.txt", ScheduleGenerators.interleavedOneFOneB(4, 8, 2));
    }

    @Test
    void interleavedWithOneStagePerRankIsOneFOneB() {
        for (int ranks : new int[] {1, 2, 4, 8}) {
            for (int microbatches : new int[] {ranks, 2 * ranks, 4 * ranks}) {
                assertEquals(ScheduleGenerators.oneFOneB(ranks, microbatches),
                        ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, 1));
            }
        }
    }

    @Test
    void oneFOneBWarmsUpWithRanksMinusOneMinusRankForwards() {
        for (int ranks : new int[] {1, 2, 4, 8}) {
            for (int microbatches : new int[] {1, 2, ranks, 3 * ranks}) {
                Schedule schedule = ScheduleGenerators.oneFOneB(ranks, microbatches);
                for (int rank = 0; rank < ranks; rank++) {
                    List<Action> actions = schedule.actions(rank);
                    int leadingForwards = 0;
                    while (leadingForwards < actions.size()
                            && actions.get(leadingForwards).type() == ActionType.FORWARD) {
                        leadingForwards++;
                    }
                    // warm-up forwards, then the first forward of the steady 1F1B pairs (if any remain)
                    int warmup = Math.min(ranks - 1 - rank, microbatches);
                    int expected = warmup + (warmup < microbatches ? 1 : 0);
                    assertEquals(expected, leadingForwards, "ranks=" + ranks + " microbatches=" + microbatches
                            + " rank=" + rank);
                }
            }
        }
    }

    private static void assertRejected(String expectedMessage, Executable call) {
        assertEquals(expectedMessage, assertThrows(IllegalArgumentException.class, call).getMessage());
    }

    @Test
    void badInputsAreRejectedWithExpectedValues() {
        assertRejected("invalid gpipe input: ranks=0 expected=ranks >= 1 (fix: pass a positive count)", () -> ScheduleGenerators.gpipe(0, 4));
        assertRejected("invalid gpipe input: microbatches=0 expected=microbatches >= 1 (fix: pass a positive count)",
                () -> ScheduleGenerators.gpipe(2, 0));
        assertRejected("invalid 1F1B input: ranks=-1 expected=ranks >= 1 (fix: pass a positive count)", () -> ScheduleGenerators.oneFOneB(-1, 2));
        assertRejected("invalid 1F1B input: microbatches=0 expected=microbatches >= 1 (fix: pass a positive count)",
                () -> ScheduleGenerators.oneFOneB(4, 0));
        assertRejected("invalid interleaved 1F1B input: ranks=0 expected=ranks >= 1 (fix: pass a positive count)",
                () -> ScheduleGenerators.interleavedOneFOneB(0, 4, 2));
        assertRejected("invalid interleaved 1F1B input: stagesPerRank=0 expected=stagesPerRank >= 1 (fix: pass a positive count)",
                () -> ScheduleGenerators.interleavedOneFOneB(2, 4, 0));
        assertRejected("invalid interleaved 1F1B input: microbatches=6 expected=a multiple of ranks=4"
                + " (fix: use microbatches=4 or 8)", () -> ScheduleGenerators.interleavedOneFOneB(4, 6, 2));
        assertRejected("invalid interleaved 1F1B input: microbatches=2 expected=a multiple of ranks=4"
                + " (fix: use microbatches=4)", () -> ScheduleGenerators.interleavedOneFOneB(4, 2, 2));
        assertRejected("invalid interleaved 1F1B input: microbatches=3 expected=a multiple of ranks=2"
                + " (fix: use microbatches=2 or 4)", () -> ScheduleGenerators.interleavedOneFOneB(2, 3, 1));
        String tooLarge = assertThrows(IllegalArgumentException.class,
                () -> ScheduleGenerators.interleavedOneFOneB(1 << 10, 1 << 20, 4)).getMessage();
        assertEquals("invalid pipeline shape: ranks=1024 microbatches=1048576 stagesPerRank=4 gives"
                + " actions=8589934592 expected=actions <= 2147483639 (fix: use fewer microbatches)", tooLarge);
    }

    @Test
    void shapeRejectsNonPositiveSizes() {
        assertRejected("invalid pipeline shape: ranks=0 expected=ranks >= 1 (fix: pass a positive count)", () -> new PipelineShape(0, 1, 1));
        assertRejected("invalid pipeline shape: microbatches=-3 expected=microbatches >= 1 (fix: pass a positive count)",
                () -> new PipelineShape(1, -3, 1));
        assertRejected("invalid pipeline shape: stagesPerRank=0 expected=stagesPerRank >= 1 (fix: pass a positive count)",
                () -> new PipelineShape(1, 1, 0));
        PipelineShape shape = new PipelineShape(4, 8, 2);
        assertEquals(8, shape.stageCount());
        assertEquals(3, shape.rankOf(7));
        assertEquals(2 * 8 * 8, shape.actionCount());
    }
}
