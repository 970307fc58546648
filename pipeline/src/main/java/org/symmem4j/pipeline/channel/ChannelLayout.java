package org.symmem4j.pipeline.channel;

import org.symmem4j.pipeline.schedule.PipelineShape;

/**
 * Where the stage-to-stage links of a pipeline live in one {@code SymmetricMemory} allocation and
 * which signal slots they use. The same layout on every rank, so a sender computes the receiver's
 * offsets from its own copy.
 *
 * <p>Every rank holds {@code v} (virtual) stages, and each stage receives on at most two links: the
 * activation link from the stage before it and the gradient link from the stage after it. So every
 * rank has {@code 2v} <i>receive regions</i>, region {@code 2 * (stage / p) + direction}, each of
 * {@link #slots()} message slots:
 *
 * <pre>
 *   region i, slot k at  (i * slots + k) * slotStride
 *   a slot:              [header: 64 bytes][payload: slotBytes rounded up to 64]
 *   header:              long payloadBytes, long sequence, int microbatch, int fromStage
 * </pre>
 *
 * Signal slots: region {@code i}'s <i>data counter</i> is slot {@code i} of the receiver's pad (the
 * messages posted into it, ever); the sender's <i>credit counter</i> for the link leaving its stage
 * {@code s} in direction {@code d} is slot {@code 2v + 2 * (s / p) + d} of the sender's pad (the
 * messages the receiver has released, ever). Both only grow, by {@link org.symmem4j.parallel.SignalOp#ADD}
 * of 1, across steps; {@link StageLink#POISON} marks an aborted pipeline.
 *
 * @param shape     the pipeline (ranks p, virtual stages v)
 * @param slots     messages a link holds before its sender must wait, {@code >= 1}
 * @param slotBytes largest payload of one message (one microbatch's activation or gradient)
 */
public record ChannelLayout(PipelineShape shape, int slots, long slotBytes) {

    /** Header bytes in front of every payload; a cache line, so payloads stay 64-byte aligned. */
    public static final int HEADER_BYTES = 64;
    static final long PAYLOAD_BYTES_OFFSET = 0;
    static final long SEQUENCE_OFFSET = 8;
    static final long MICROBATCH_OFFSET = 16;
    static final long FROM_STAGE_OFFSET = 20;

    /** Direction of a link, seen from the receiving stage. */
    public enum Direction {
        /** Forward: the previous stage's output activation. */
        ACTIVATION,
        /** Backward: the next stage's gradient with respect to this stage's output. */
        GRADIENT
    }

    /**
     * Checks the layout.
     *
     * @throws IllegalArgumentException when {@code slots} or {@code slotBytes} is below 1
     */
    public ChannelLayout {
        java.util.Objects.requireNonNull(shape, "shape");
        if (slots < 1) {
            throw new IllegalArgumentException("invalid channel layout: slots=" + slots + " expected=slots >= 1"
                    + " (fix: pass a positive slot count, e.g. 2)");
        }
        if (slotBytes < 1) {
            throw new IllegalArgumentException("invalid channel layout: slotBytes=" + slotBytes
                    + " expected=slotBytes >= 1 (the largest activation or gradient of one microbatch, in bytes;"
                    + " fix: pass that size)");
        }
    }

    /**
     * Bytes from one slot to the next.
     *
     * @return the stride in bytes: a header plus the payload rounded up to 64
     */
    public long slotStride() {
        return HEADER_BYTES + roundUp64(slotBytes);
    }

    /**
     * Receive regions per rank: two per (virtual) stage.
     *
     * @return the region count
     */
    public int regionsPerRank() {
        return 2 * shape.stagesPerRank();
    }

    /**
     * Bytes of symmetric memory every rank needs.
     *
     * @return the size in bytes
     * @throws ArithmeticException if it overflows a long
     */
    public long bytesPerRank() {
        return Math.multiplyExact(Math.multiplyExact((long) regionsPerRank(), slots), slotStride());
    }

    /**
     * Signal slots of every pad the layout uses: a data counter per region and a credit counter per send link.
     *
     * @return the signal slot count
     */
    public int signalSlotsNeeded() {
        return 2 * regionsPerRank();
    }

    /**
     * The receive region, on the rank of {@code receivingStage}, of the link arriving there in {@code direction}.
     *
     * @param receivingStage the stage the link arrives at
     * @param direction the direction the link carries messages in
     * @return the region index
     */
    public int region(int receivingStage, Direction direction) {
        return 2 * (receivingStage / shape.ranks()) + direction.ordinal();
    }

    /**
     * Byte offset of slot {@code slot} of region {@code region}.
     *
     * @param region the region index
     * @param slot the slot in the region
     * @return the byte offset in the rank's symmetric memory
     */
    public long slotOffset(int region, int slot) {
        return ((long) region * slots + slot) * slotStride();
    }

    /**
     * The receiver-pad signal slot counting messages posted into {@code region}.
     *
     * @param region the region index
     * @return the signal slot index
     */
    public int dataSignal(int region) {
        return region;
    }

    /**
     * The sender-pad signal slot counting messages released by the receiver of the link leaving
     * {@code sendingStage}; the link to stage {@code s + 1} carries activations, to {@code s - 1} gradients.
     *
     * @param sendingStage the stage the link leaves
     * @param direction the direction the link carries messages in
     * @return the signal slot index
     */
    public int creditSignal(int sendingStage, Direction direction) {
        return regionsPerRank() + 2 * (sendingStage / shape.ranks()) + direction.ordinal();
    }

    private static long roundUp64(long bytes) {
        return Math.addExact(bytes, 63) & ~63L;
    }
}
