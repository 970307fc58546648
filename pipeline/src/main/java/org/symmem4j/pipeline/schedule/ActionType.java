package org.symmem4j.pipeline.schedule;

/**
 * What an {@link Action} computes for one microbatch on one stage. Each type has a one-letter
 * symbol used in the text form of actions ({@code 0F3}, {@code 2B0}).
 */
public enum ActionType {
    /** Forward pass of a stage: consumes the previous stage's activation, keeps its own for backward. */
    FORWARD('F'),
    /** Backward pass of a stage: consumes the next stage's gradient, frees the stage's activation. */
    BACKWARD('B');

    private final char symbol;

    ActionType(char symbol) {
        this.symbol = symbol;
    }

    /**
     * The letter this type is written as in an action's text form.
     *
     * @return {@code F} or {@code B}
     */
    public char symbol() {
        return symbol;
    }

    /** The type written as {@code symbol}, or {@code null} when no type uses that letter. */
    static ActionType ofSymbol(char symbol) {
        for (ActionType type : values()) {
            if (type.symbol == symbol) {
                return type;
            }
        }
        return null;
    }
}
