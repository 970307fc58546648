package org.symmem4j.parallel.rendezvous;

import java.time.Duration;
import java.util.Objects;

/**
 * What one {@link TcpStoreServer} accepts, so that no client — buggy, hostile, or merely slow — can
 * take its memory, its threads or its time. A rank's set-up traffic is a few keys of at most a few
 * hundred bytes each; the defaults leave orders of magnitude of room for that and none for abuse.
 *
 * @param maxKeyBytes            longest key, in modified-UTF-8 bytes
 * @param maxValueBytes          largest value; a larger announced length drops the connection
 *                               before a byte of it is buffered
 * @param maxTotalBytes          all keys and values stored at once; a {@code SET} beyond it fails
 *                               with an error the client sees, and the store stays as it was
 * @param maxBytesPerConnection  bytes one connection may send over its life (requests included)
 * @param maxConnections         connections open at once, authenticated or not; a connection
 *                               beyond it takes the place of the oldest unauthenticated one, or is
 *                               closed as soon as it is accepted when every open one is authenticated
 * @param maxUnauthenticated     connections open at once that have not yet proved the secret; a
 *                               new connection beyond it takes the place of the one held longest
 *                               (which is closed), so strangers holding connections never keep a
 *                               rank out: a rank's handshake takes two round trips, and it is
 *                               evicted only if this many connections arrive during them (it then
 *                               reconnects)
 * @param handshakeTimeout       how long a new connection may take to complete its whole handshake
 *                               (a deadline from accept, not a per-read timeout)
 * @param requestTimeout         how long the rest of a request may take once its first byte arrived
 *                               (a slow sender cannot hold a server thread)
 */
public record StoreLimits(int maxKeyBytes, int maxValueBytes, long maxTotalBytes, long maxBytesPerConnection,
                          int maxConnections, int maxUnauthenticated, Duration handshakeTimeout,
                          Duration requestTimeout) {

    /**
     * Validates the limits.
     *
     * @throws NullPointerException if a timeout is null
     * @throws IllegalArgumentException if a limit is not positive or {@code maxKeyBytes} exceeds 65535
     */
    public StoreLimits {
        Objects.requireNonNull(handshakeTimeout, "handshakeTimeout");
        Objects.requireNonNull(requestTimeout, "requestTimeout");
        positive("maxKeyBytes", maxKeyBytes);
        positive("maxValueBytes", maxValueBytes);
        positive("maxTotalBytes", maxTotalBytes);
        positive("maxBytesPerConnection", maxBytesPerConnection);
        positive("maxConnections", maxConnections);
        positive("maxUnauthenticated", maxUnauthenticated);
        if (maxKeyBytes > 65_535) {
            throw new IllegalArgumentException("maxKeyBytes=" + maxKeyBytes + " exceeds the wire format's 65535"
                    + " (fix: pass at most 65535)");
        }
        if (handshakeTimeout.isNegative() || handshakeTimeout.isZero() || requestTimeout.isNegative()
                || requestTimeout.isZero()) {
            throw new IllegalArgumentException("handshakeTimeout=" + handshakeTimeout + " and requestTimeout="
                    + requestTimeout + " must be positive (fix: pass"
                    + " positive durations, or use StoreLimits.defaults())");
        }
    }

    private static void positive(String name, long v) {
        if (v <= 0) {
            throw new IllegalArgumentException(name + "=" + v + " must be positive (fix: pass a positive value,"
                    + " or use StoreLimits.defaults())");
        }
    }

    /**
     * Defaults for a group of {@code worldSize} ranks: 512-byte keys, 4 MiB values, 64 MiB stored,
     * 256 MiB sent per connection, {@link #defaultMaxUnauthenticated()} unauthenticated connections
     * and {@code 64 + 2 * worldSize} more in all, 10 s for a handshake and for the rest of a request.
     *
     * @param worldSize ranks in the group (values below 1 count as 1)
     * @return the default limits
     */
    public static StoreLimits defaults(int worldSize) {
        int unauthenticated = defaultMaxUnauthenticated();
        return new StoreLimits(512, 4 << 20, 64L << 20, 256L << 20, unauthenticated + 64 + 2 * Math.max(1, worldSize),
                unauthenticated, Duration.ofSeconds(10), Duration.ofSeconds(10));
    }

    /**
     * How many unauthenticated connections a store holds by default: a quarter of this process's
     * file descriptor limit, within [64, 4096] (4096 when the limit cannot be read). On Linux the JVM
     * raises the soft {@code ulimit -n} to the hard one at start, so with the common hard limits of
     * 4096 and 524288 this is 1024 and 4096; strangers can then hold at most a quarter of rank 0's
     * descriptors, and about 9 KiB of heap each (measured: 36 MiB for 4,096 held half-sent handshakes).
     *
     * @return the default {@code maxUnauthenticated}
     */
    public static int defaultMaxUnauthenticated() {
        long maxFds = openFileLimit();
        return (int) Math.max(64, Math.min(4096, maxFds / 4));
    }

    /**
     * This process's soft limit of open files, from {@code /proc/self/limits} (16,384 where that cannot be
     * read). Read from the file, not from {@code com.sun.management.UnixOperatingSystemMXBean}: that class
     * lives in the {@code jdk.management} module, which a jlinked runtime may leave out, and rank 0 must not
     * fail to start for it.
     */
    static long openFileLimit() {
        try {
            for (String line : java.nio.file.Files.readAllLines(java.nio.file.Path.of("/proc/self/limits"))) {
                if (line.startsWith("Max open files")) {
                    String soft = line.substring("Max open files".length()).trim().split("\\s+")[0];
                    return soft.equals("unlimited") ? Long.MAX_VALUE : Long.parseLong(soft);
                }
            }
        } catch (java.io.IOException | RuntimeException e) {
            // not Linux, or an unexpected format: the fallback below
        }
        return 16_384;
    }

    /**
     * A copy with another handshake timeout.
     *
     * @param d the new {@code handshakeTimeout}
     * @return the new limits
     */
    public StoreLimits withHandshakeTimeout(Duration d) {
        return new StoreLimits(maxKeyBytes, maxValueBytes, maxTotalBytes, maxBytesPerConnection, maxConnections,
                maxUnauthenticated, d, requestTimeout);
    }

    /**
     * A copy with another request timeout.
     *
     * @param d the new {@code requestTimeout}
     * @return the new limits
     */
    public StoreLimits withRequestTimeout(Duration d) {
        return new StoreLimits(maxKeyBytes, maxValueBytes, maxTotalBytes, maxBytesPerConnection, maxConnections,
                maxUnauthenticated, handshakeTimeout, d);
    }

    /**
     * A copy with another total capacity.
     *
     * @param bytes the new {@code maxTotalBytes}
     * @return the new limits
     */
    public StoreLimits withMaxTotalBytes(long bytes) {
        return new StoreLimits(maxKeyBytes, maxValueBytes, bytes, maxBytesPerConnection, maxConnections,
                maxUnauthenticated, handshakeTimeout, requestTimeout);
    }

    /**
     * A copy with other connection limits.
     *
     * @param connections the new {@code maxConnections}
     * @param unauthenticated the new {@code maxUnauthenticated}
     * @return the new limits
     */
    public StoreLimits withMaxConnections(int connections, int unauthenticated) {
        return new StoreLimits(maxKeyBytes, maxValueBytes, maxTotalBytes, maxBytesPerConnection, connections,
                unauthenticated, handshakeTimeout, requestTimeout);
    }
}
