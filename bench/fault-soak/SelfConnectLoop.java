import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;

/**
 * How often a client retrying a connect to a port nothing listens on yet connects to itself, and whether the listener
 * can then bind the port (the restarted job's false failure, fixed by SelfConnection in the rendezvous store's
 * client). Single-file program: {@code java bench/fault-soak/SelfConnectLoop.java TRIALS ATTEMPTS OFFSET close|discard}.
 * Each trial takes a port P the system gives a listener (bind to port 0, then closed), aims at P + OFFSET (the
 * launcher's next generation takes its store port + 1), makes up to ATTEMPTS refused connects (a rank retrying while
 * rank 0's JVM starts), and on a self-connection closes that socket normally ({@code close}: the old client) or with a
 * reset ({@code discard}: SelfConnection), then tries to bind P + OFFSET as the store does (SO_REUSEADDR).
 */
public class SelfConnectLoop {
    public static void main(String[] args) throws Exception {
        int trials = Integer.parseInt(args[0]);
        int attempts = Integer.parseInt(args[1]);
        int portOffset = Integer.parseInt(args[2]);
        boolean discard = args[3].equals("discard");
        InetAddress loopback = InetAddress.getLoopbackAddress();
        int self = 0;
        int bindFailures = 0;
        for (int t = 0; t < trials; t++) {
            int port;
            try (ServerSocket probe = new ServerSocket(0, 1, loopback)) {
                port = probe.getLocalPort() + portOffset;
            }
            boolean selfConnected = false;
            for (int n = 0; n < attempts && !selfConnected; n++) {
                Socket s = new Socket();
                try {
                    s.connect(new InetSocketAddress(loopback, port), 1000);
                    if (s.getLocalPort() == s.getPort()) {
                        selfConnected = true;
                        if (discard) {
                            s.setSoLinger(true, 0);
                        }
                    }
                } catch (java.io.IOException refused) {
                    // nothing listens: retry
                } finally {
                    s.close();
                }
            }
            if (selfConnected) {
                self++;
                try (ServerSocket store = new ServerSocket()) {
                    store.setReuseAddress(true);
                    store.bind(new InetSocketAddress(loopback, port));
                } catch (java.net.BindException e) {
                    bindFailures++;
                }
            }
        }
        System.out.println("trials " + trials + " x up to " + attempts + " connects to a bind(0) port + " + portOffset
                + ", " + args[3] + ": self-connections " + self + ", store bind failures after them " + bindFailures);
    }
}
