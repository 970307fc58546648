package org.symmem4j.parallel;

/**
 * Reductions. Peers are always combined in ascending rank order, so every rank gets a
 * bitwise-identical result, run after run. MAX and MIN follow {@link Math#max(float, float)}:
 * NaN wins, and +0.0 is greater than -0.0. AVG is the SUM divided by the world size. A NaN result is
 * always the canonical quiet NaN ({@code Float.NaN}, {@code Double.NaN}, bf16 {@code 0x7FC0}), because
 * the sign and payload hardware gives a NaN depend on operand order and would differ between code
 * paths.
 */
public enum ReduceOp {
    SUM,
    AVG,
    MAX,
    MIN
}
