package org.symmem4j.parallel;

/**
 * Reductions. Peers are always combined in ascending rank order, so every rank gets a
 * bitwise-identical result, run after run. MAX and MIN follow {@link Math#max(float, float)}:
 * NaN wins, and +0.0 is greater than -0.0. AVG is the SUM divided by the world size. NaN results are
 * bitwise identical on every rank too: ONE_SHOT, where each rank computes every element itself,
 * writes the canonical quiet NaN ({@code Float.NaN}, {@code Double.NaN}), because the sign and
 * payload hardware gives a NaN depend on the compiled code; TWO_SHOT and RING compute each element
 * on one rank and copy it, so their NaNs keep whatever bits that rank produced.
 */
public enum ReduceOp {
    /** The sum over ranks, in rank order. */
    SUM,
    /** The sum divided by the world size. */
    AVG,
    /** The maximum ({@link Math#max(float, float)}'s rules). */
    MAX,
    /** The minimum ({@link Math#min(float, float)}'s rules). */
    MIN
}
