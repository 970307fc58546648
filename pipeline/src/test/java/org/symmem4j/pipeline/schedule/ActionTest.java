package org.symmem4j.pipeline.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class ActionTest {

    @Test
    void printsStageTypeMicrobatch() {
        assertEquals("0F3", Action.forward(0, 3).toString());
        assertEquals("2B0", Action.backward(2, 0).toString());
        assertEquals("12F105", new Action(12, ActionType.FORWARD, 105).toString());
    }

    @Test
    void parsesWhatItPrints() {
        assertEquals(Action.forward(0, 3), Action.parse("0F3"));
        assertEquals(Action.backward(2, 0), Action.parse("2B0"));
        for (int stage = 0; stage < 40; stage += 13) {
            for (ActionType type : ActionType.values()) {
                for (int microbatch = 0; microbatch < 300; microbatch += 37) {
                    Action action = new Action(stage, type, microbatch);
                    assertEquals(action, Action.parse(action.toString()));
                }
            }
        }
        Action largest = new Action(Integer.MAX_VALUE, ActionType.BACKWARD, Integer.MAX_VALUE);
        assertEquals(largest, Action.parse(largest.toString()));
    }

    private static String parseError(String text) {
        return assertThrows(IllegalArgumentException.class, () -> Action.parse(text)).getMessage();
    }

    @Test
    void badTextNamesPositionExpectedAndFound() {
        assertParseError("0X3", "position=1 expected='F', 'B', 'I' or 'W' found='X'");
        assertParseError("0f3", "position=1 expected='F', 'B', 'I' or 'W' found='f'");
        assertParseError("", "position=0 expected=a stage number (digits) found=end of text");
        assertParseError("F3", "position=0 expected=a stage number (digits) found='F'");
        assertParseError(" 0F3", "position=0 expected=a stage number (digits) found=' '");
        assertParseError("-1F0", "position=0 expected=a stage number (digits) found='-'");
        assertParseError("12", "position=2 expected='F', 'B', 'I' or 'W' found=end of text");
        assertParseError("0F", "position=2 expected=a microbatch number (digits) found=end of text");
        assertParseError("0F3x", "position=3 expected=end of action found='x'");
        assertParseError("0F3 ", "position=3 expected=end of action found=' '");
        assertParseError("99999999999F0", "position=0 expected=a stage number <= 2147483647 found=99999999999");
        assertParseError("0B2147483648", "position=2 expected=a microbatch number <= 2147483647 found=2147483648");
    }

    private static void assertParseError(String text, String expectedPart) {
        String message = parseError(text);
        assertTrue(message.startsWith("invalid action: text=\"" + text + "\" "), message);
        assertTrue(message.contains(expectedPart), message);
        assertTrue(message.contains("e.g. 0F3"), message);
    }

    @Test
    void negativeNumbersAreRejected() {
        String stage = assertThrows(IllegalArgumentException.class, () -> Action.forward(-1, 0)).getMessage();
        assertEquals("invalid action: stage=-1 expected=stage >= 0 (fix: number stages from 0)", stage);
        String microbatch = assertThrows(IllegalArgumentException.class, () -> Action.backward(0, -2)).getMessage();
        assertEquals("invalid action: microbatch=-2 expected=microbatch >= 0 (fix: number microbatches from 0)",
                microbatch);
    }
}
