package org.symmem4j.dl4j;

import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.prometheus.metrics.config.ExporterHttpServerProperties;
import io.prometheus.metrics.config.PrometheusProperties;
import io.prometheus.metrics.exporter.httpserver.HTTPServer;
import java.io.IOException;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.SymmemException;

/**
 * Serves a {@link PrometheusMeterRegistry} over HTTP with the Prometheus Java client's own exporter
 * ({@code io.prometheus.metrics.exporter.httpserver.HTTPServer}, on the JDK's HTTP server):
 *
 * <ul>
 *   <li>{@code /metrics}: the registry, in the format the scraper asks for (Prometheus text,
 *       OpenMetrics or protobuf), gzip-compressed when accepted, {@code ?name[]=} selects series;
 *   <li>{@code /-/healthy}: 200 while the server runs, for liveness checks.
 * </ul>
 *
 * <pre>{@code
 * PrometheusEndpoint endpoint = PrometheusEndpoint.start(registry, 9404);   // http://127.0.0.1:9404/metrics
 * PrometheusEndpoint endpoint = PrometheusEndpoint.builder(registry)
 *         .host("0.0.0.0").port(9404)            // every interface: only when asked, and logged
 *         .threads(8).queuedRequests(32).requestTimeout(Duration.ofSeconds(10))
 *         .start();
 * }</pre>
 *
 * <p><b>Loopback by default.</b> The metrics are not secret, but an open port on a training box
 * should be a decision: {@link #start(PrometheusMeterRegistry, int)} binds 127.0.0.1, and any other
 * address is bound only when named, with a log line saying so.
 *
 * <p><b>No client can stall the endpoint.</b> Requests run on a pool of {@link Builder#threads}
 * threads with up to {@link Builder#queuedRequests} waiting; a request beyond that has its connection
 * closed at once (the JDK server closes a connection whose exchange the pool refuses), so accepting
 * connections never blocks. No request holds a pool thread longer than {@link Builder#requestTimeout}
 * (from its first byte to the last byte of the response): past it the thread is interrupted, which
 * closes the connection (blocking channel I/O is interruptible), so a half-sent request or a client
 * that stops reading is dropped after at most that long. This does not depend on the JDK server's
 * JVM-wide {@code sun.net.httpserver.maxReqTime} / {@code maxRspTime} (read once, when the first
 * server of the JVM starts; the Prometheus exporter sets them to 60 s / 600 s if unset), which still
 * apply as outer bounds. Connections that send nothing hold no thread; the JDK server closes them
 * after {@code sun.net.httpserver.idleInterval} (30 s) or {@code maxReqTime}, whichever is less.
 *
 * <p>The server's threads are daemon threads: a running endpoint does not keep the JVM alive.
 */
public final class PrometheusEndpoint implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(PrometheusEndpoint.class);

    /** The address bound unless another is named: IPv4 loopback. */
    public static final String LOOPBACK = "127.0.0.1";
    /** Requests served at once by default. */
    public static final int DEFAULT_THREADS = 8;
    /** Requests that may wait for a thread by default. */
    public static final int DEFAULT_QUEUED_REQUESTS = 32;
    /** The longest one request may hold a thread by default: Prometheus' default scrape timeout. */
    public static final Duration DEFAULT_REQUEST_TIMEOUT = Duration.ofSeconds(10);

    private final HTTPServer server;
    private final BoundedExchangePool pool;
    private final InetAddress address;

    private PrometheusEndpoint(HTTPServer server, BoundedExchangePool pool, InetAddress address) {
        this.server = server;
        this.pool = pool;
        this.address = address;
    }

    /**
     * Starts serving on loopback with the defaults.
     *
     * @param registry the registry to serve
     * @param port     the TCP port; 0 picks a free port (see {@link #port()})
     * @return the running endpoint; {@link #close()} stops it
     * @throws IllegalArgumentException when {@code port} is outside 0..65535
     * @throws IllegalStateException    when the optional Prometheus dependencies are missing (see {@link #builder})
     * @throws SymmemException          when the port cannot be bound
     */
    public static PrometheusEndpoint start(PrometheusMeterRegistry registry, int port) {
        return builder(registry).port(port).start();
    }

    /**
     * Starts serving on {@code host:port} with the defaults; a host other than loopback is logged.
     * Same as {@code builder(registry).host(host).port(port).start()}.
     *
     * @param registry the registry to serve
     * @param host     the address to bind: a name or literal, {@code "0.0.0.0"} for every interface
     * @param port     the TCP port; 0 picks a free port
     * @return the running endpoint; {@link #close()} stops it
     * @throws IllegalArgumentException when the host does not resolve or the port is out of range
     * @throws IllegalStateException    when the optional Prometheus dependencies are missing (see {@link #builder})
     * @throws SymmemException          when the address cannot be bound
     */
    public static PrometheusEndpoint start(PrometheusMeterRegistry registry, String host, int port) {
        return builder(registry).host(host).port(port).start();
    }

    /**
     * A builder: loopback, a free port, {@value #DEFAULT_THREADS} threads, 10 s per request unless told otherwise.
     *
     * @param registry the registry to serve
     * @return a builder; {@link Builder#start()} binds and serves
     * @throws NullPointerException when {@code registry} is null
     * @throws IllegalStateException when {@code micrometer-registry-prometheus} or
     *         {@code prometheus-metrics-exporter-httpserver} is not on the class path (both are optional
     *         dependencies of this plugin: a user of this class declares them)
     */
    public static Builder builder(PrometheusMeterRegistry registry) {
        requireOptionalDependencies();
        return new Builder(registry);
    }

    /**
     * The plugin declares the Prometheus registry and exporter optional, so that users of other
     * registries do not get them. Without this check a missing exporter would surface as a bare
     * {@code NoClassDefFoundError} from the middle of {@link Builder#start()}.
     */
    private static void requireOptionalDependencies() {
        StringBuilder missing = new StringBuilder();
        String[][] needed = {
                {"io.micrometer.prometheusmetrics.PrometheusMeterRegistry", "io.micrometer:micrometer-registry-prometheus"},
                {"io.prometheus.metrics.exporter.httpserver.HTTPServer", "io.prometheus:prometheus-metrics-exporter-httpserver"}};
        for (String[] classAndArtifact : needed) {
            try {
                Class.forName(classAndArtifact[0], false, PrometheusEndpoint.class.getClassLoader());
            } catch (ClassNotFoundException | LinkageError e) {
                missing.append(missing.isEmpty() ? "" : ", ").append(classAndArtifact[1]);
            }
        }
        if (!missing.isEmpty()) {
            throw new IllegalStateException("PrometheusEndpoint needs " + missing + " on the class path, found: absent"
                    + " (add them as dependencies: the symmem4j plugin declares them optional; take the"
                    + " prometheus-metrics-exporter-httpserver version that your micrometer-registry-prometheus"
                    + " depends on, e.g. 1.3.5 with Micrometer 1.14.4, which symmem4j is built with)");
        }
    }

    /**
     * The port the server listens on.
     *
     * @return the bound TCP port (the one picked when 0 was asked for)
     */
    public int port() {
        return server.getPort();
    }

    /**
     * The scrape URL.
     *
     * @return {@code http://<address>:<port>/metrics}
     */
    public String url() {
        return base() + "/metrics";
    }

    /**
     * The health-check URL ({@code /-/healthy}: 200 while the server runs).
     *
     * @return {@code http://<address>:<port>/-/healthy}
     */
    public String healthUrl() {
        return base() + "/-/healthy";
    }

    /**
     * Requests whose thread was interrupted at {@link Builder#requestTimeout}, closing their connection, since start.
     *
     * @return the count since start
     */
    public long timedOutRequests() {
        return pool.timedOut();
    }

    private String base() {
        String host = address.getHostAddress();
        return "http://" + (address instanceof Inet6Address ? "[" + host + "]" : host) + ":" + port();
    }

    /** Stops the server at once: open connections are closed, and the threads end. */
    @Override
    public void close() {
        server.close();
    }

    /** Settings of an endpoint; {@link #start()} binds and serves. */
    public static final class Builder {
        private final PrometheusMeterRegistry registry;
        private String host = LOOPBACK;
        private int port;
        private int threads = DEFAULT_THREADS;
        private int queuedRequests = DEFAULT_QUEUED_REQUESTS;
        private Duration requestTimeout = DEFAULT_REQUEST_TIMEOUT;

        private Builder(PrometheusMeterRegistry registry) {
            this.registry = Objects.requireNonNull(registry, "registry");
        }

        /**
         * The address to bind (default {@value PrometheusEndpoint#LOOPBACK}): a name or literal; {@code "0.0.0.0"} or
         * {@code "::"} for every interface. Anything but loopback is logged when the server starts.
         *
         * @param host a host name or address literal
         * @return this builder
         */
        public Builder host(String host) {
            this.host = Objects.requireNonNull(host, "host");
            return this;
        }

        /**
         * The port (default 0: any free port, see {@link PrometheusEndpoint#port()}).
         *
         * @param port 0..65535; 0 picks a free port
         * @return this builder
         * @throws IllegalArgumentException when {@code port} is out of range
         */
        public Builder port(int port) {
            if (port < 0 || port > 65535) {
                throw new IllegalArgumentException("port=" + port + " expected 0..65535 (0 picks a free port)");
            }
            this.port = port;
            return this;
        }

        /**
         * Requests served at once (default {@value PrometheusEndpoint#DEFAULT_THREADS}).
         *
         * @param threads at least 1
         * @return this builder
         * @throws IllegalArgumentException when {@code threads} is below 1
         */
        public Builder threads(int threads) {
            if (threads < 1) {
                throw new IllegalArgumentException("threads=" + threads + " expected >= 1 (default "
                        + DEFAULT_THREADS + ")");
            }
            this.threads = threads;
            return this;
        }

        /**
         * Requests that wait for a thread when all are busy (default
         * {@value PrometheusEndpoint#DEFAULT_QUEUED_REQUESTS}); one more has its connection closed at once.
         *
         * @param queuedRequests at least 0
         * @return this builder
         * @throws IllegalArgumentException when {@code queuedRequests} is negative
         */
        public Builder queuedRequests(int queuedRequests) {
            if (queuedRequests < 0) {
                throw new IllegalArgumentException("queuedRequests=" + queuedRequests + " expected >= 0 (default "
                        + DEFAULT_QUEUED_REQUESTS + ")");
            }
            this.queuedRequests = queuedRequests;
            return this;
        }

        /**
         * The longest one request may hold a thread, from its first byte to the last byte of the
         * response (default 10 s, Prometheus' default scrape timeout); then its connection is closed.
         *
         * @param requestTimeout at least 1 ms
         * @return this builder
         * @throws IllegalArgumentException when {@code requestTimeout} is null or below 1 ms
         */
        public Builder requestTimeout(Duration requestTimeout) {
            if (requestTimeout == null || requestTimeout.toMillis() < 1) {
                throw new IllegalArgumentException("requestTimeout=" + requestTimeout
                        + " expected at least 1 ms (default " + DEFAULT_REQUEST_TIMEOUT + ")");
            }
            this.requestTimeout = requestTimeout;
            return this;
        }

        /**
         * Binds and starts serving.
         *
         * @throws IllegalArgumentException when the host does not resolve
         * @throws SymmemException          when the address cannot be bound (port taken, no such interface)
         *
         * @return the running endpoint; {@link PrometheusEndpoint#close()} stops it
         */
        public PrometheusEndpoint start() {
            InetAddress address;
            try {
                address = InetAddress.getByName(host);
            } catch (UnknownHostException e) {
                throw new IllegalArgumentException("metrics endpoint host=" + host + " does not resolve: " + e.getMessage()
                        + " (use an address of this machine, " + LOOPBACK + " (the default) or 0.0.0.0 for every interface)", e);
            }
            BoundedExchangePool pool = new BoundedExchangePool("symmem4j-metrics-http", threads, queuedRequests,
                    requestTimeout);
            HTTPServer server;
            try {
                server = HTTPServer.builder(exporterProperties())
                        .inetAddress(address)
                        .port(port)
                        .registry(registry.getPrometheusRegistry())
                        .executorService(pool)
                        .buildAndStart();
            } catch (IOException | RuntimeException e) {
                pool.shutdownNow();
                throw new SymmemException("cannot serve metrics: host=" + host + " port=" + port + " error=" + e
                        + " (pick another port, or 0 for any free port)", e);
            }
            PrometheusEndpoint endpoint = new PrometheusEndpoint(server, pool, address);
            if (!address.isLoopbackAddress()) {
                LOG.info("metrics endpoint bound to " + address.getHostAddress()
                        + (address.isAnyLocalAddress() ? " (every interface)" : "")
                        + ", not loopback: other hosts can read " + endpoint.url() + " (asked for with host=" + host + ")");
            }
            return endpoint;
        }

        /**
         * The exporter's settings ({@code prometheus.properties}, {@code io.prometheus.*} system
         * properties: formats, name filters), less {@code io.prometheus.exporter.httpServer.port},
         * which would silently replace the port given here.
         */
        private static PrometheusProperties exporterProperties() {
            PrometheusProperties p = PrometheusProperties.get();
            return new PrometheusProperties(p.getDefaultMetricProperties(), Map.of(), p.getExemplarProperties(),
                    p.getExporterProperties(), p.getExporterFilterProperties(), ExporterHttpServerProperties.builder().build(),
                    p.getExporterPushgatewayProperties(), p.getExporterOpenTelemetryProperties());
        }
    }
}
