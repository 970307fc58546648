package org.symmem4j.pipeline.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class ScheduleTextTest {

    @Test
    void printsOneLinePerRank() {
        Schedule schedule = new Schedule(List.of(
                List.of(Action.forward(0, 0), Action.forward(0, 1), Action.backward(0, 0), Action.backward(0, 1)),
                List.of(Action.forward(1, 0), Action.backward(1, 0)),
                List.of()));
        assertEquals("rank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0\nrank 2:\n", schedule.toText());
        assertEquals(schedule.toText(), schedule.toString());
        assertEquals(schedule, Schedule.parse(schedule.toText()));
    }

    @Test
    void everyGeneratedScheduleRoundTrips() {
        for (int ranks : new int[] {1, 2, 3, 4, 8}) {
            for (int microbatches : new int[] {ranks, 2 * ranks, 4 * ranks}) {
                for (Schedule schedule : List.of(ScheduleGenerators.gpipe(ranks, microbatches),
                        ScheduleGenerators.oneFOneB(ranks, microbatches),
                        ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, 2),
                        ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, 3))) {
                    String text = schedule.toText();
                    Schedule parsed = Schedule.parse(text);
                    assertEquals(schedule, parsed, text);
                    assertEquals(text, parsed.toText());
                }
            }
        }
    }

    @Test
    void skipsCommentsAndBlankLinesAndAcceptsCrLfAndTabs() {
        String text = "# a comment\r\n\r\nrank 0:\t0F0  0B0\r\n   # indented comment\nrank 1: 1F0 1B0   \n\n";
        Schedule parsed = Schedule.parse(text);
        assertEquals("rank 0: 0F0 0B0\nrank 1: 1F0 1B0\n", parsed.toText());
    }

    private static String parseError(String text) {
        return assertThrows(IllegalArgumentException.class, () -> Schedule.parse(text)).getMessage();
    }

    @Test
    void ranksOutOfOrderNameTheLine() {
        assertEquals("invalid schedule text: line=1 expected=\"rank 0: <actions>\" found=\"rank 1: 1F0\""
                + " (one line per rank, ranks in order from 0; fix: start line 1 with \"rank 0:\")",
                parseError("rank 1: 1F0\n"));
        assertEquals("invalid schedule text: line=3 expected=\"rank 1: <actions>\" found=\"rank 0: 1F0\""
                + " (one line per rank, ranks in order from 0; fix: start line 3 with \"rank 1:\")",
                parseError("rank 0: 0F0\n\nrank 0: 1F0\n"));
        String noSpace = parseError("rank 0:0F0");
        assertTrue(noSpace.contains("line=1 expected=\"rank 0: <actions>\" found=\"rank 0:0F0\""), noSpace);
        String tenIsNotOne = parseError("rank 0:\nrank 10: 0F0");
        assertTrue(tenIsNotOne.contains("line=2 expected=\"rank 1: <actions>\""), tenIsNotOne);
        String garbage = parseError("0F0 0B0");
        assertTrue(garbage.contains("line=1 expected=\"rank 0: <actions>\" found=\"0F0 0B0\""), garbage);
    }

    @Test
    void badActionNamesLineRankAndToken() {
        String message = parseError("rank 0: 0F0 0B0\nrank 1: 1F0 1X0 1B0\n");
        assertTrue(message.startsWith("invalid schedule text: line=2 rank=1 token=2: invalid action: text=\"1X0\""
                + " position=1 expected='F', 'B', 'I' or 'W' found='X'"), message);
    }

    @Test
    void emptyTextIsRejected() {
        String message = parseError("# only a comment\n\n");
        assertTrue(message.contains("expected=\"rank 0: <actions>\" found=no rank lines"), message);
    }

    @Test
    void actionListsAreImmutableCopies() {
        ArrayList<Action> rank0 = new ArrayList<>(List.of(Action.forward(0, 0)));
        Schedule schedule = new Schedule(List.of(rank0));
        rank0.add(Action.backward(0, 0));
        assertEquals(1, schedule.actions(0).size());
        assertThrows(UnsupportedOperationException.class, () -> schedule.actions(0).add(Action.backward(0, 0)));
    }
}
