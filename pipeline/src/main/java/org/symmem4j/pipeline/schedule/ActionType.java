package org.symmem4j.pipeline.schedule;

/**
 * What an {@link Action} computes for one microbatch on one stage. Each type has a one-letter
 * symbol used in the text form of actions ({@code 0F3}, {@code 2B0}, {@code 1I2}, {@code 1W2}).
 *
 * <p>A stage's backward of a microbatch is either one {@link #BACKWARD} or, in zero-bubble schedules,
 * its two halves: {@link #INPUT_GRADIENT} (the gradient the previous stage waits for) and
 * {@link #WEIGHT_GRADIENT} (the parameter gradients, which no other stage needs, so a schedule can
 * move them into what would otherwise be a bubble). The letters are those of torch.distributed's
 * schedule IR and the zero-bubble paper (Qi et al., 2023).
 */
public enum ActionType {
    /** Forward pass of a stage: consumes the previous stage's activation, keeps its own for backward. */
    FORWARD('F'),
    /** Backward pass of a stage: consumes the next stage's gradient, frees the stage's activation. */
    BACKWARD('B'),
    /**
     * First half of a split backward: consumes the next stage's gradient and sends the gradient with
     * respect to the stage's input to the previous stage; keeps what {@link #WEIGHT_GRADIENT} needs.
     */
    INPUT_GRADIENT('I'),
    /**
     * Second half of a split backward: the stage's parameter gradients of the microbatch, on the same
     * rank after its {@link #INPUT_GRADIENT}; no message in or out. Frees the stage's activation.
     */
    WEIGHT_GRADIENT('W');

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

    /**
     * Which link carries this type's message between stages: {@link #FORWARD} (activations, to the
     * next stage), {@link #BACKWARD} (gradients, to the previous stage, for both a whole backward and
     * its input-gradient half), or {@code null} for {@link #WEIGHT_GRADIENT}, which sends nothing.
     *
     * @return the link's type, or {@code null}
     */
    public ActionType link() {
        return switch (this) {
            case FORWARD -> FORWARD;
            case BACKWARD, INPUT_GRADIENT -> BACKWARD;
            case WEIGHT_GRADIENT -> null;
        };
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
