package org.symmem4j.prometheus;

import com.sun.net.httpserver.HttpContext;
import com.sun.net.httpserver.HttpServer;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.prometheus.metrics.config.PrometheusProperties;
import io.prometheus.metrics.exporter.httpserver.DefaultHandler;
import io.prometheus.metrics.exporter.httpserver.HealthyHandler;
import io.prometheus.metrics.exporter.httpserver.MetricsHandler;
import java.io.IOException;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.SymmemException;

/**
 * Serves a {@link PrometheusMeterRegistry} over HTTP with the Prometheus Java client's own handlers
 * ({@code prometheus-metrics-exporter-httpserver}) on the JDK's HTTP server:
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
 *         .maxRequests(1024).requestTimeout(Duration.ofSeconds(10))
 *         .start();
 * }</pre>
 *
 * <p><b>Loopback by default.</b> The metrics are not secret, but an open port on a training box
 * should be a decision: {@link #start(PrometheusMeterRegistry, int)} binds 127.0.0.1, and any other
 * address is bound only when named, with a log line saying so.
 *
 * <p><b>No client can stall the endpoint.</b> The JDK server reads a request's line and headers with
 * blocking reads on the thread it runs the request on, from the request's first byte; so every request
 * runs on a virtual thread of its own, and a client that sends half a request parks only that one.
 * Bounds, per request and in all:
 * <ul>
 *   <li>time: no request runs longer than {@link Builder#requestTimeout} (from its first byte to the
 *       last byte of the response); then its thread is interrupted, which closes the connection;
 *   <li>memory: a request head (line and headers) larger than the JDK's
 *       {@code sun.net.httpserver.maxReqHeaderSize} has its connection closed; when that JVM-wide
 *       property is unset as the first endpoint starts, it is set to {@value #MAX_REQUEST_HEAD_BYTES}
 *       bytes (the JDK's default is 380 KiB; the JDK reads it once, when the JVM's first HTTP server starts,
 *       so a value set before, or a server started before, wins);
 *   <li>count: at most {@link Builder#maxRequests} requests at once; one more closes the oldest request
 *       still being read (failing that, the oldest), so whoever holds that many cannot keep a scraper out.
 * </ul>
 * Connections that send nothing hold no thread; the JDK server closes them after
 * {@code sun.net.httpserver.idleInterval} (30 s).
 *
 * <p>The server's threads are daemon threads: a running endpoint does not keep the JVM alive.
 */
public final class PrometheusEndpoint implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(PrometheusEndpoint.class);

    /** The address bound unless another is named: IPv4 loopback. */
    public static final String LOOPBACK = "127.0.0.1";
    /** Requests served or read at once by default; one more closes the oldest still being read. */
    public static final int DEFAULT_MAX_REQUESTS = 1024;
    /** The longest one request may run by default: Prometheus' default scrape timeout. */
    public static final Duration DEFAULT_REQUEST_TIMEOUT = Duration.ofSeconds(10);
    /**
     * The bound on a request's line and headers set (JVM-wide) when {@code sun.net.httpserver.maxReqHeaderSize}
     * is unset: a Prometheus scrape's head is a few hundred bytes.
     */
    public static final int MAX_REQUEST_HEAD_BYTES = 8192;

    /** The JDK server's bound on a request head, in bytes (0 or less: none); read once per JVM. */
    private static final String MAX_HEAD_PROPERTY = "sun.net.httpserver.maxReqHeaderSize";
    /** Pending connections the kernel queues before the server accepts them (capped by net.core.somaxconn). */
    private static final int BACKLOG = 1024;
    /** The longest {@link Builder#start()} waits for the server's dispatcher thread to start. */
    private static final Duration START_TIMEOUT = Duration.ofSeconds(30);

    private final HttpServer server;
    private final RequestExecutor executor;
    private final InetAddress address;

    private PrometheusEndpoint(HttpServer server, RequestExecutor executor, InetAddress address) {
        this.server = server;
        this.executor = executor;
        this.address = address;
    }

    /**
     * Starts serving on loopback with the defaults.
     *
     * @param registry the registry to serve
     * @param port     the TCP port; 0 picks a free port (see {@link #port()})
     * @return the running endpoint; {@link #close()} stops it
     * @throws IllegalArgumentException when {@code port} is outside 0..65535
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
     * @throws SymmemException          when the address cannot be bound
     */
    public static PrometheusEndpoint start(PrometheusMeterRegistry registry, String host, int port) {
        return builder(registry).host(host).port(port).start();
    }

    /**
     * A builder: loopback, a free port, {@value #DEFAULT_MAX_REQUESTS} requests at once, 10 s per request unless
     * told otherwise.
     *
     * @param registry the registry to serve
     * @return a builder; {@link Builder#start()} binds and serves
     * @throws NullPointerException when {@code registry} is null
     */
    public static Builder builder(PrometheusMeterRegistry registry) {
        return new Builder(registry);
    }

    /**
     * The port the server listens on.
     *
     * @return the bound TCP port (the one picked when 0 was asked for)
     */
    public int port() {
        return server.getAddress().getPort();
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
     * Requests closed at {@link Builder#requestTimeout} since start.
     *
     * @return the count since start
     */
    public long timedOutRequests() {
        return executor.timedOut();
    }

    /**
     * Requests closed since start because {@link Builder#maxRequests} newer ones arrived.
     *
     * @return the count since start
     */
    public long evictedRequests() {
        return executor.evicted();
    }

    /**
     * Requests being read or answered now: from a connection's first byte of a request to the end of its
     * response, or until the request is closed.
     *
     * @return the count now, at most {@link Builder#maxRequests}
     */
    public int requestsInFlight() {
        return executor.inFlight();
    }

    private String base() {
        String host = address.getHostAddress();
        return "http://" + (address instanceof Inet6Address ? "[" + host + "]" : host) + ":" + port();
    }

    /** Stops the server at once: open connections are closed, and running requests' threads are interrupted. */
    @Override
    public void close() {
        server.stop(0);
        executor.close();
    }

    /** Settings of an endpoint; {@link #start()} binds and serves. */
    public static final class Builder {
        private final PrometheusMeterRegistry registry;
        private String host = LOOPBACK;
        private int port;
        private int maxRequests = DEFAULT_MAX_REQUESTS;
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
                throw new IllegalArgumentException("port=" + port + " expected 0..65535 (fix: pass a free TCP port,"
                        + " e.g. 9404, or 0 to pick a free one)");
            }
            this.port = port;
            return this;
        }

        /**
         * Requests read or answered at once (default {@value PrometheusEndpoint#DEFAULT_MAX_REQUESTS}): one more
         * closes the oldest request still being read (failing that, the oldest). Each costs a virtual thread,
         * a socket and buffers (tens of KiB while its head is read, up to the head bound).
         *
         * @param maxRequests at least 1
         * @return this builder
         * @throws IllegalArgumentException when {@code maxRequests} is below 1
         */
        public Builder maxRequests(int maxRequests) {
            if (maxRequests < 1) {
                throw new IllegalArgumentException("maxRequests=" + maxRequests + " expected >= 1 (default "
                        + DEFAULT_MAX_REQUESTS + "; fix: pass 1 or more, or leave it unset)");
            }
            this.maxRequests = maxRequests;
            return this;
        }

        /**
         * The longest one request may run, from its first byte to the last byte of the response (default
         * 10 s, Prometheus' default scrape timeout); then its connection is closed.
         *
         * @param requestTimeout at least 1 ms
         * @return this builder
         * @throws IllegalArgumentException when {@code requestTimeout} is null or below 1 ms
         */
        public Builder requestTimeout(Duration requestTimeout) {
            if (requestTimeout == null || requestTimeout.toMillis() < 1) {
                throw new IllegalArgumentException("requestTimeout=" + requestTimeout
                        + " expected at least 1 ms (default " + DEFAULT_REQUEST_TIMEOUT + "; fix: pass e.g."
                        + " Duration.ofSeconds(10), or leave it unset)");
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
                        + " (fix: use an address of this machine, " + LOOPBACK + " (the default) or 0.0.0.0 for every"
                        + " interface)", e);
            }
            System.getProperties().putIfAbsent(MAX_HEAD_PROPERTY, Integer.toString(MAX_REQUEST_HEAD_BYTES));
            RequestExecutor executor = new RequestExecutor("symmem4j-metrics-http", maxRequests, requestTimeout);
            HttpServer server;
            try {
                server = HttpServer.create(new InetSocketAddress(address, port), BACKLOG);
            } catch (IOException | RuntimeException e) {
                executor.close();
                throw new SymmemException("cannot serve metrics: host=" + host + " port=" + port + " error=" + e
                        + " (fix: pick another port, or 0 for any free port)", e);
            }
            server.setExecutor(executor);
            // the Prometheus client's own handlers, as its HTTPServer registers them (without authentication);
            // its io.prometheus.* properties (formats, name filters) apply, its port property does not
            PrometheusProperties properties = PrometheusProperties.get();
            List<HttpContext> contexts = List.of(
                    server.createContext("/", new DefaultHandler()),
                    server.createContext("/metrics", new MetricsHandler(properties, registry.getPrometheusRegistry())),
                    server.createContext("/-/healthy", new HealthyHandler()));
            for (HttpContext context : contexts) {
                context.getFilters().add(executor.headReadFilter());
            }
            startDaemon(server, executor);
            PrometheusEndpoint endpoint = new PrometheusEndpoint(server, executor, address);
            if (!address.isLoopbackAddress()) {
                LOG.info("metrics endpoint bound to " + address.getHostAddress()
                        + (address.isAnyLocalAddress() ? " (every interface)" : "")
                        + ", not loopback: other hosts can read " + endpoint.url() + " (asked for with host=" + host + ")");
            }
            return endpoint;
        }

        /**
         * Starts the server's dispatcher thread from a virtual thread: the JDK creates it with the daemon status
         * of the thread that calls {@code start()}, and virtual threads are daemons (the Prometheus client's
         * HTTPServer starts it from its pool's daemon threads for the same reason).
         */
        private void startDaemon(HttpServer server, RequestExecutor executor) {
            Thread starter = Thread.ofVirtual().name("symmem4j-metrics-http-start").start(server::start);
            boolean started;
            try {
                started = starter.join(START_TIMEOUT);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                started = false;
            }
            if (!started) {
                server.stop(0);
                executor.close();
                throw new SymmemException("cannot serve metrics: host=" + host + " port=" + port
                        + " the server did not start within " + START_TIMEOUT + " (or start() was interrupted; fix: call"
                        + " start() again; if it keeps timing out, the JVM cannot start threads: check memory and"
                        + " ulimit -u)");
            }
        }
    }
}
