package org.symmem4j.pipeline.schedule;

import java.util.Objects;

/**
 * One step of a pipeline schedule: run {@code type} for {@code microbatch} on {@code stage}.
 *
 * <p>Its text form is {@code <stage><F|B|I|W><microbatch>}, for example {@code 0F3} (stage 0, forward,
 * microbatch 3), {@code 2B0}, or {@code 1I2} and {@code 1W2} (the two halves of a split backward, see
 * {@link ActionType}); {@link #toString()} writes it and {@link #parse(String)} reads it back.
 *
 * @param stage      pipeline stage, {@code >= 0}; stage {@code s} lives on rank {@code s % ranks}
 * @param type       forward, backward, or a half of a split backward
 * @param microbatch microbatch index, {@code >= 0}
 */
public record Action(int stage, ActionType type, int microbatch) {

    /**
     * Checks the action.
     *
     * @throws IllegalArgumentException when the stage or the microbatch is negative
     */
    public Action {
        Objects.requireNonNull(type, "type");
        if (stage < 0) {
            throw new IllegalArgumentException("invalid action: stage=" + stage + " expected=stage >= 0"
                    + " (fix: number stages from 0)");
        }
        if (microbatch < 0) {
            throw new IllegalArgumentException(
                    "invalid action: microbatch=" + microbatch + " expected=microbatch >= 0 (fix: number microbatches"
                    + " from 0)");
        }
    }

    /**
     * Forward of {@code microbatch} on {@code stage}.
     *
     * @param stage the stage, {@code >= 0}
     * @param microbatch the microbatch, {@code >= 0}
     * @return the action
     * @throws IllegalArgumentException if either is negative
     */
    public static Action forward(int stage, int microbatch) {
        return new Action(stage, ActionType.FORWARD, microbatch);
    }

    /**
     * Backward of {@code microbatch} on {@code stage}.
     *
     * @param stage the stage, {@code >= 0}
     * @param microbatch the microbatch, {@code >= 0}
     * @return the action
     * @throws IllegalArgumentException if either is negative
     */
    public static Action backward(int stage, int microbatch) {
        return new Action(stage, ActionType.BACKWARD, microbatch);
    }

    /**
     * Input-gradient half of the backward of {@code microbatch} on {@code stage}.
     *
     * @param stage the stage, {@code >= 0}
     * @param microbatch the microbatch, {@code >= 0}
     * @return the action
     * @throws IllegalArgumentException if either is negative
     */
    public static Action inputGradient(int stage, int microbatch) {
        return new Action(stage, ActionType.INPUT_GRADIENT, microbatch);
    }

    /**
     * Weight-gradient half of the backward of {@code microbatch} on {@code stage}.
     *
     * @param stage the stage, {@code >= 0}
     * @param microbatch the microbatch, {@code >= 0}
     * @return the action
     * @throws IllegalArgumentException if either is negative
     */
    public static Action weightGradient(int stage, int microbatch) {
        return new Action(stage, ActionType.WEIGHT_GRADIENT, microbatch);
    }

    /**
     * Reads the text form written by {@link #toString()}: decimal stage, {@code F}, {@code B}, {@code I} or {@code W},
     * decimal microbatch, nothing else (no spaces, no signs).
     *
     * @param text the text form, for example {@code 3F12}
     * @return the action
     * @throws IllegalArgumentException naming the position, what was expected there and what was found
     */
    public static Action parse(String text) {
        Objects.requireNonNull(text, "text");
        int stageEnd = digitsEnd(text, 0);
        if (stageEnd == 0) {
            throw parseError(text, 0, "a stage number (digits)");
        }
        if (stageEnd == text.length()) {
            throw parseError(text, stageEnd, "'F', 'B', 'I' or 'W'");
        }
        ActionType type = ActionType.ofSymbol(text.charAt(stageEnd));
        if (type == null) {
            throw parseError(text, stageEnd, "'F', 'B', 'I' or 'W'");
        }
        int microbatchStart = stageEnd + 1;
        int microbatchEnd = digitsEnd(text, microbatchStart);
        if (microbatchEnd == microbatchStart) {
            throw parseError(text, microbatchStart, "a microbatch number (digits)");
        }
        if (microbatchEnd != text.length()) {
            throw parseError(text, microbatchEnd, "end of action");
        }
        int stage = parseNumber(text, 0, stageEnd, "stage");
        int microbatch = parseNumber(text, microbatchStart, microbatchEnd, "microbatch");
        return new Action(stage, type, microbatch);
    }

    /** The text form, e.g. {@code 0F3}; {@link #parse(String)} reads it back. */
    @Override
    public String toString() {
        return Integer.toString(stage) + type.symbol() + microbatch;
    }

    private static int digitsEnd(String text, int from) {
        int end = from;
        // ASCII digits only: Character.isDigit would accept other scripts' digits that parseInt reads
        while (end < text.length() && text.charAt(end) >= '0' && text.charAt(end) <= '9') {
            end++;
        }
        return end;
    }

    private static int parseNumber(String text, int from, int to, String what) {
        try {
            return Integer.parseInt(text, from, to, 10);
        } catch (NumberFormatException e) {
            throw parseError(text, from, "a " + what + " number <= " + Integer.MAX_VALUE,
                    text.substring(from, to));
        }
    }

    private static IllegalArgumentException parseError(String text, int position, String expected) {
        String found = position < text.length() ? "'" + text.charAt(position) + "'" : "end of text";
        return parseError(text, position, expected, found);
    }

    private static IllegalArgumentException parseError(String text, int position, String expected, String found) {
        return new IllegalArgumentException("invalid action: text=\"" + text + "\" position=" + position
                + " expected=" + expected + " found=" + found + " (fix: write it as <stage><F|B|I|W><microbatch>, e.g."
                + " 0F3, 2B0 or 1I2)");
    }
}
