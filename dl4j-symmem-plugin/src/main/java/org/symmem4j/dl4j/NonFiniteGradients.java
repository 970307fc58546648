package org.symmem4j.dl4j;

/** What a data-parallel step does when the averaged gradient holds NaN or an infinity. */
public enum NonFiniteGradients {
    /** Stop training: {@code fit()} throws a {@link NonFiniteGradientException} naming the workers and the step. */
    FAIL,
    /** Skip the step on every worker (parameters and updater state untouched), log it, and go on. */
    SKIP_STEP
}
