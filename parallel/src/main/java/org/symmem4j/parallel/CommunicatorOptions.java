package org.symmem4j.parallel;

/**
 * Sizing of a communicator's internal symmetric scratch memory.
 *
 * @param stagingBytes bytes per staging half: buffers that are not symmetric memory are copied in
 *                     and reduced in pieces of at most this size (two halves alternate, so
 *                     consecutive pieces need no extra barrier)
 * @param ringSegmentBytes bytes (in the accumulation type) of one ring step's partial sums
 */
public record CommunicatorOptions(long stagingBytes, long ringSegmentBytes) {

    /** Default {@code stagingBytes}: 4 MiB per half. */
    public static final long DEFAULT_STAGING_BYTES = 4L << 20;
    /** Default {@code ringSegmentBytes}: 1 MiB. */
    public static final long DEFAULT_RING_SEGMENT_BYTES = 1L << 20;

    /**
     * Checks the sizes.
     *
     * @throws IllegalArgumentException when {@code stagingBytes} is below 4096 or
     *         {@code ringSegmentBytes} below 512, or either is not a multiple of 64
     */
    public CommunicatorOptions {
        if (stagingBytes < 4096 || stagingBytes % 64 != 0) {
            throw new IllegalArgumentException("stagingBytes=" + stagingBytes
                    + " must be a multiple of 64 and >= 4096 (default " + DEFAULT_STAGING_BYTES
                    + "; fix: pass a multiple of 64 of at least 4096, or leave it unset)");
        }
        if (ringSegmentBytes < 512 || ringSegmentBytes % 64 != 0) {
            throw new IllegalArgumentException("ringSegmentBytes=" + ringSegmentBytes
                    + " must be a multiple of 64 and >= 512 (default " + DEFAULT_RING_SEGMENT_BYTES
                    + "; fix: pass a multiple of 64 of at least 512, or leave it unset)");
        }
    }

    /**
     * The default sizes.
     *
     * @return 4 MiB staging halves and 1 MiB ring segments
     */
    public static CommunicatorOptions defaults() {
        return new CommunicatorOptions(DEFAULT_STAGING_BYTES, DEFAULT_RING_SEGMENT_BYTES);
    }
}
