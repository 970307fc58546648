package org.symmem4j.dl4j;

import com.sun.net.httpserver.HttpServer;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;
import org.symmem4j.parallel.SymmemException;

/**
 * Serves a {@link PrometheusMeterRegistry} at {@code http://<host>:<port>/metrics} in Prometheus'
 * text format, with the JDK's own HTTP server. Binds to loopback unless told otherwise: the
 * metrics are not secret, but an open port on a training box should be a decision.
 */
public final class PrometheusEndpoint implements AutoCloseable {

    public static final String LOOPBACK = "127.0.0.1";

    private final HttpServer server;

    private PrometheusEndpoint(HttpServer server) {
        this.server = server;
    }

    /** Starts serving on {@code host:port} ({@code port} 0 picks a free port, see {@link #port()}). */
    public static PrometheusEndpoint start(PrometheusMeterRegistry registry, String host, int port) {
        HttpServer server;
        try {
            server = HttpServer.create(new InetSocketAddress(host, port), 16);
        } catch (IOException e) {
            throw new SymmemException("cannot serve /metrics on " + host + ":" + port + ": " + e
                    + " (pick another port, or 0 for any free port)", e);
        }
        server.createContext("/metrics", exchange -> {
            byte[] body = registry.scrape().getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.setExecutor(Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "symmem4j-metrics-http");
            t.setDaemon(true);
            return t;
        }));
        server.start();
        return new PrometheusEndpoint(server);
    }

    /** Starts serving on loopback. */
    public static PrometheusEndpoint start(PrometheusMeterRegistry registry, int port) {
        return start(registry, LOOPBACK, port);
    }

    public int port() {
        return server.getAddress().getPort();
    }

    /** The scrape URL. */
    public String url() {
        return "http://" + server.getAddress().getHostString() + ":" + port() + "/metrics";
    }

    @Override
    public void close() {
        server.stop(0);
    }
}
