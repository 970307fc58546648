package org.symmem4j.gradsync;

/**
 * Message-size buckets for metric tags: few distinct values, so time series stay cheap, and the
 * boundaries match where host algorithms change character (cache-resident / L2-L3 / memory).
 */
public enum SizeClass {
    /** Up to 64 KiB: latency-bound, usually ONE_SHOT. */
    SMALL("small", 64L << 10),
    /** Up to 4 MiB: cache-resident, usually TWO_SHOT. */
    MEDIUM("medium", 4L << 20),
    /** Above 4 MiB: memory-bandwidth-bound. */
    LARGE("large", Long.MAX_VALUE);

    private final String tag;
    private final long maxBytes;

    SizeClass(String tag, long maxBytes) {
        this.tag = tag;
        this.maxBytes = maxBytes;
    }

    /**
     * The tag value ({@code size.class}).
     *
     * @return the tag value
     */
    public String tag() {
        return tag;
    }

    /**
     * The largest message of this class.
     *
     * @return bytes, inclusive
     */
    public long maxBytes() {
        return maxBytes;
    }

    /**
     * The class of a message.
     *
     * @param bytes the message's size in bytes
     * @return the smallest class whose {@link #maxBytes()} holds it
     */
    public static SizeClass of(long bytes) {
        for (SizeClass c : values()) {
            if (bytes <= c.maxBytes) {
                return c;
            }
        }
        return LARGE;
    }
}
