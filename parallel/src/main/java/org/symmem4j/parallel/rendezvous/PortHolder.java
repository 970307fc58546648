package org.symmem4j.parallel.rendezvous;

import java.io.IOException;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

/**
 * What holds a TCP port that a store's bind was refused on, when no symmem4j store answers there: for rank 0's error,
 * which would otherwise blame "another job" for a port that no job holds.
 *
 * <p>Two cases look the same to {@code bind} (EADDRINUSE) and differ for the fix:
 * <pre>
 *   something listens on P       connect(P) succeeds     another program's server: stop it or move this job
 *   nothing listens on P         connect(P) is refused   a socket that does not listen holds P: a connection of some
 *                                                        program that the system gave P as its local port (P inside
 *                                                        the ephemeral range), or one closing in TIME_WAIT
 * </pre>
 * A port inside the machine's ephemeral range ({@code net.ipv4.ip_local_port_range}) can be taken by any program's
 * outgoing connection at any time, so the message says so and names the range.
 */
public final class PortHolder {

    /** Where Linux keeps the range of local ports it hands to outgoing connections. */
    static final Path EPHEMERAL_RANGE_FILE = Path.of("/proc/sys/net/ipv4/ip_local_port_range");

    private PortHolder() {
    }

    /**
     * Describes what holds {@code host:port}, by one connect attempt (a self-connection is recognised and dropped with a
     * reset, so the probe never takes the port itself: {@link SelfConnection}).
     *
     * @param host    the address the bind was refused on
     * @param port    the port
     * @param timeout how long the connect may take
     * @return a phrase that completes "the port is held by ..." and ends with the fix
     */
    public static String describe(String host, int port, Duration timeout) {
        String range = ephemeralNote(port, readEphemeralRange());
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), (int) Math.max(1, Math.min(Integer.MAX_VALUE, timeout.toMillis())));
            if (SelfConnection.isSelfConnected(s)) {
                SelfConnection.discard(s);
                return notListening(port, range);
            }
            return "a program that accepts connections on port " + port + " but is not a symmem4j store" + range
                    + " (fix: stop that program, or give this job another MASTER_PORT)";
        } catch (ConnectException refused) {
            return notListening(port, range);
        } catch (IOException | RuntimeException e) {
            return "something this rank could not identify (a connect to " + host + ":" + port + " failed: " + e
                    + ")" + range + " (fix: give this job another MASTER_PORT, or find the holder with `ss -tanp | grep :"
                    + port + "`)";
        }
    }

    private static String notListening(int port, String range) {
        return "a socket that does not listen: no program accepts connections on port " + port + ", so it is the local"
                + " port of some program's connection, or of one still closing (TIME_WAIT, up to 60 s)" + range
                + " (fix: give this job a MASTER_PORT outside the ephemeral range, or see the holder with `ss -tanp |"
                + " grep :" + port + "`)";
    }

    /**
     * {@return ", inside this machine's ephemeral range LO–HI (...)" when {@code port} is in {@code range}, else ""}
     *
     * @param port  the port
     * @param range the ephemeral range as {low, high}, or null when unknown
     */
    static String ephemeralNote(int port, int[] range) {
        if (range == null || port < range[0] || port > range[1]) {
            return "";
        }
        return "; port " + port + " is inside this machine's ephemeral range " + range[0] + "–" + range[1]
                + " (net.ipv4.ip_local_port_range), from which the system picks the local ports of outgoing"
                + " connections, so any program can take it at any time";
    }

    /** {@return the ephemeral range as {low, high}, or null where the system does not say (not Linux, unreadable)} */
    static int[] readEphemeralRange() {
        // a stream, not Files.readString: /proc reports a size of 0, and readString read one byte of it here (JDK 25)
        try (java.io.InputStream in = Files.newInputStream(EPHEMERAL_RANGE_FILE)) {
            return parseEphemeralRange(new String(in.readAllBytes(), java.nio.charset.StandardCharsets.US_ASCII));
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    /**
     * Parses {@code ip_local_port_range}'s "LOW HIGH" (whitespace between, a newline after).
     *
     * @param text the file's content
     * @return {low, high}, or null when the text is not two ports with low at most high
     */
    static int[] parseEphemeralRange(String text) {
        String[] parts = text.trim().split("\\s+");
        if (parts.length != 2) {
            return null;
        }
        try {
            int low = Integer.parseInt(parts[0]);
            int high = Integer.parseInt(parts[1]);
            return low >= 0 && low <= high && high <= 65535 ? new int[] {low, high} : null;
        } catch (NumberFormatException e) {
            return null;
        }
    }
}
