package org.symmem4j.dl4j;

/** The number format gradients travel in between workers (see {@code Builder.gradientTransfer}). */
public enum GradientTransfer {
    /** The network's own type: the average is exact to that type's rounding (default). */
    NETWORK_DTYPE,
    /**
     * bfloat16 for FLOAT networks: each worker rounds its gradient to bf16, the sum is accumulated in
     * fp32 and rounded once to bf16, then widened and divided in fp32. Half the bytes; each averaged
     * element is off by up to about 2^-8 relative (plus the rounding of each worker's input).
     */
    BFLOAT16
}
