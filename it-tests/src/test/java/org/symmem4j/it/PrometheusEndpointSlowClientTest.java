package org.symmem4j.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.micrometer.core.instrument.Counter;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.symmem4j.prometheus.PrometheusEndpoint;

/**
 * The metrics endpoint against clients that connect and then stall: half-sent request lines, headers
 * without the blank line that ends them, a body shorter than its Content-Length, and a connection
 * that sends nothing; one at a time and 128 at once. Scrapes and health checks must still be answered
 * while they hang on, the server must drop a stalled request by itself, at its cap close the oldest
 * request still being read rather than refuse a scraper, and close a request head beyond its size bound.
 * Assertions are functional (an answer arrives within a generous client timeout, a connection is
 * closed by the server, counts), never a measured time: {@code MetricsEndpointStallBench} measures.
 */
class PrometheusEndpointSlowClientTest {

    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);
    private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(CLIENT_TIMEOUT).build();
    /** Half-open requests held at once in the many-clients case: more than any fixed pool plus queue served before. */
    private static final int MANY = 128;

    /** Requests cut off inside their request line or headers: the server has their first bytes and waits for the rest. */
    private static final List<String> HALF_SENT = List.of(
            "GET /metr",
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            "GET /-/healthy HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\nX-Slow: ");

    /**
     * Complete headers, then a body shorter than its Content-Length: the server answers (the handler
     * reads no body) and then waits for the rest of the body, to drain it, on the request's thread.
     */
    private static final String SHORT_BODY =
            "POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nonly a few bytes";

    private final List<Socket> clients = new ArrayList<>();
    private PrometheusEndpoint endpoint;

    @AfterEach
    void closeAll() throws IOException, InterruptedException {
        for (Socket s : clients) {
            s.close();
        }
        if (endpoint != null) {
            endpoint.close();
            awaitRequestsInFlight(0); // close() ends every request, stalled ones included
        }
        awaitNoEndpointPlatformThreads();
    }

    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void scrapesAndHealthChecksAreAnsweredWhileSlowClientsHoldTheirConnections() throws Exception {
        PrometheusMeterRegistry registry = registryWithOneCounter();
        // a request timeout far beyond this test: every stalled client stays connected throughout
        endpoint = PrometheusEndpoint.builder(registry).requestTimeout(Duration.ofMinutes(10)).start();
        assertTrue(endpoint.url().startsWith("http://127.0.0.1:"), "loopback by default: " + endpoint.url());

        connect(); // sends nothing: waits in the server's selector, holds no thread
        List<Socket> halfSent = new ArrayList<>();
        for (String request : HALF_SENT) {
            halfSent.add(send(connect(), request));
        }
        send(connect(), SHORT_BODY);
        awaitRequestsInFlight(HALF_SENT.size() + 1); // the short body's request too: answered, waiting for the body

        for (int i = 0; i < 3; i++) {
            assertScrapeAnswered("while " + HALF_SENT.size() + " half-sent requests and a short body are held");
            HttpResponse<String> health = get(endpoint.healthUrl());
            assertEquals(200, health.statusCode(), "GET " + endpoint.healthUrl());
        }
        for (Socket s : halfSent) {
            assertStillOpen(s);
        }
        assertEquals(0, endpoint.timedOutRequests(), "no request reached the 10-minute timeout");
        assertEquals(0, endpoint.evictedRequests(), "far below maxRequests nothing is evicted");
    }

    /**
     * The case of issue #29: a fixed pool of 8 threads and 32 queued requests answered a scrape after 8.5 s
     * behind 8 half-sent requests and closed it behind 40. Here 128 are held, every one of them open
     * throughout, while scrapes are answered.
     */
    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void scrapesAreAnsweredWhile128HalfSentRequestsAreHeld() throws Exception {
        PrometheusMeterRegistry registry = registryWithOneCounter();
        endpoint = PrometheusEndpoint.builder(registry).requestTimeout(Duration.ofMinutes(10)).start();
        List<Socket> held = new ArrayList<>();
        for (int i = 0; i < MANY; i++) {
            held.add(send(connect(), HALF_SENT.get(i % HALF_SENT.size())));
        }
        awaitRequestsInFlightOrOneClosed(MANY, held);

        for (int i = 0; i < 3; i++) {
            assertScrapeAnswered("while " + MANY + " half-sent requests are held");
            assertEquals(200, get(endpoint.healthUrl()).statusCode(), "GET " + endpoint.healthUrl());
        }
        for (Socket s : held) {
            assertStillOpen(s);
        }
        awaitRequestsInFlight(MANY); // the scrapes' own requests ended; every held one is still being read
        assertEquals(0, endpoint.evictedRequests(), MANY + " held < maxRequests=" + PrometheusEndpoint.DEFAULT_MAX_REQUESTS);
        assertEquals(0, endpoint.timedOutRequests(), "no request reached the 10-minute timeout");
    }

    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void theServerDropsAStalledRequestAtTheRequestTimeout() throws Exception {
        PrometheusMeterRegistry registry = registryWithOneCounter();
        endpoint = PrometheusEndpoint.builder(registry).requestTimeout(Duration.ofSeconds(2)).start();
        Socket stalled = send(connect(), HALF_SENT.get(1));
        awaitRequestsInFlight(1);

        assertScrapeAnswered("while a stalled request waits for its timeout");
        assertClosedByServer(stalled);
        assertEquals(1, endpoint.timedOutRequests(), "the endpoint's own deadline dropped the request (counted before)");
        awaitRequestsInFlight(0);
        for (int i = 0; i < 3; i++) {
            assertEquals(200, get(endpoint.url()).statusCode(), "GET " + endpoint.url() + " #" + i);
        }
    }

    /**
     * At the cap a new request closes the oldest request still being read, not one whose head was read
     * (the short body, oldest of all, is being answered), and never the newcomer: the scraper gets in.
     */
    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void atTheCapTheOldestRequestStillBeingReadIsClosedAndTheScrapeAnswered() throws Exception {
        PrometheusMeterRegistry registry = registryWithOneCounter();
        int cap = 4;
        endpoint = PrometheusEndpoint.builder(registry).maxRequests(cap).requestTimeout(Duration.ofMinutes(10)).start();
        Socket shortBody = send(connect(), SHORT_BODY);
        awaitRequestsInFlight(1);
        List<Socket> halfSent = new ArrayList<>();
        for (int i = 0; i < cap - 1; i++) { // one at a time: their order is the server's order
            halfSent.add(send(connect(), HALF_SENT.get(i % HALF_SENT.size())));
            awaitRequestsInFlight(2 + i);
        }

        assertScrapeAnswered("with maxRequests=" + cap + " requests held");
        assertClosedByServer(halfSent.get(0));
        assertEquals(1, endpoint.evictedRequests(), "the scrape evicted one held request");
        for (Socket s : halfSent.subList(1, halfSent.size())) {
            assertStillOpen(s);
        }
        assertAnsweredAndStillOpen(shortBody);
        awaitRequestsInFlight(cap - 1); // the evicted one and the scrape are gone

        endpoint.close();
        awaitRequestsInFlight(0);
        for (Socket s : halfSent.subList(1, halfSent.size())) {
            assertClosedByServer(s); // close() ends the stalled requests too
        }
        endpoint = null;
    }

    /** A head beyond the bound is closed when the bound is crossed, not held until the request timeout. */
    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void aRequestHeadBeyondTheSizeBoundIsClosed() throws Exception {
        PrometheusMeterRegistry registry = registryWithOneCounter();
        endpoint = PrometheusEndpoint.builder(registry).requestTimeout(Duration.ofMinutes(10)).start();
        assertEquals(Integer.toString(PrometheusEndpoint.MAX_REQUEST_HEAD_BYTES),
                System.getProperty("sun.net.httpserver.maxReqHeaderSize"), "set by the first endpoint of this JVM");
        Socket huge = send(connect(), "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: "
                + "a".repeat(PrometheusEndpoint.MAX_REQUEST_HEAD_BYTES + 1)); // no end of line: the client would go on
        Socket small = send(connect(), HALF_SENT.get(2));
        assertClosedByServer(huge);
        assertStillOpen(small);
        assertEquals(0, endpoint.timedOutRequests(), "closed by the size bound, not the 10-minute timeout");
        assertScrapeAnswered("after a head beyond the size bound");
    }

    // ---------------------------------------------------------------------------------------------

    private static PrometheusMeterRegistry registryWithOneCounter() {
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        Counter.builder("symmem.endpoint.test").register(registry).increment();
        return registry;
    }

    private void assertScrapeAnswered(String context) throws InterruptedException {
        HttpResponse<String> metrics;
        try {
            metrics = get(endpoint.url());
        } catch (IOException e) {
            throw new AssertionError("GET " + endpoint.url() + " " + context + ": " + e, e);
        }
        assertEquals(200, metrics.statusCode(), "GET " + endpoint.url() + " " + context);
        assertTrue(metrics.body().contains("symmem_endpoint_test_total 1.0"),
                "the registry's counter in the scrape:\n" + metrics.body());
    }

    private Socket connect() throws IOException {
        Socket s = new Socket();
        clients.add(s);
        s.connect(new InetSocketAddress("127.0.0.1", endpoint.port()), (int) CLIENT_TIMEOUT.toMillis());
        return s;
    }

    private static Socket send(Socket s, String partialRequest) throws IOException {
        s.getOutputStream().write(partialRequest.getBytes(StandardCharsets.US_ASCII));
        s.getOutputStream().flush();
        return s;
    }

    private static HttpResponse<String> get(String url) throws IOException, InterruptedException {
        return HTTP.send(HttpRequest.newBuilder(URI.create(url)).timeout(CLIENT_TIMEOUT).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    /** Waits until the endpoint reads or answers exactly {@code n} requests (a half-sent one counts from its first byte). */
    private void awaitRequestsInFlight(int n) throws InterruptedException {
        long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
        while (endpoint.requestsInFlight() != n) {
            if (System.nanoTime() > deadline) {
                fail("expected " + n + " requests in flight, found " + endpoint.requestsInFlight() + " after " + CLIENT_TIMEOUT);
            }
            Thread.sleep(10);
        }
    }

    /**
     * Waits until {@code n} requests are in flight, or until the server closed one of {@code held} (a server
     * that cannot hold them all refuses some: the assertions that follow then say what went wrong).
     */
    private void awaitRequestsInFlightOrOneClosed(int n, List<Socket> held) throws InterruptedException, IOException {
        long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
        while (endpoint.requestsInFlight() < n) {
            for (Socket s : held) {
                if (closedByServer(s)) {
                    System.out.println("a held request was closed by the server with "
                            + endpoint.requestsInFlight() + " in flight");
                    return;
                }
            }
            if (System.nanoTime() > deadline) {
                fail("expected " + n + " requests in flight, found " + endpoint.requestsInFlight() + " after " + CLIENT_TIMEOUT);
            }
            Thread.sleep(10);
        }
    }

    private static List<String> endpointPlatformThreads() {
        return Thread.getAllStackTraces().keySet().stream().map(Thread::getName)
                .filter(n -> n.startsWith("symmem4j-metrics-http-")).toList();
    }

    /** The endpoint's platform threads (its watchdog) end with close(); its request threads are virtual. */
    private static void awaitNoEndpointPlatformThreads() throws InterruptedException {
        long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
        while (!endpointPlatformThreads().isEmpty()) {
            if (System.nanoTime() > deadline) {
                fail("metrics endpoint threads still alive " + CLIENT_TIMEOUT + " after close(): " + endpointPlatformThreads());
            }
            Thread.sleep(20);
        }
    }

    /** Whether the server closed {@code s}: end of stream or a reset within 1 ms; false when it is open and silent. */
    private static boolean closedByServer(Socket s) throws IOException {
        s.setSoTimeout(1);
        try {
            return s.getInputStream().read() < 0;
        } catch (SocketTimeoutException open) {
            return false;
        } catch (SocketException reset) {
            return true;
        }
    }

    /** The server has not closed {@code s}: a read finds no data and no end of stream. */
    private static void assertStillOpen(Socket s) throws IOException {
        s.setSoTimeout(1);
        try {
            int b = s.getInputStream().read();
            fail("expected a stalled connection still open and silent, read returned " + b);
        } catch (SocketTimeoutException expected) {
            // open, nothing sent
        } catch (SocketException reset) {
            fail("expected a stalled connection still open and silent, found it reset: " + reset);
        }
    }

    /** The server answered {@code s} (a whole 200 response arrived) and did not close it: it waits for the rest of the body. */
    private static void assertAnsweredAndStillOpen(Socket s) throws IOException {
        s.setSoTimeout((int) CLIENT_TIMEOUT.toMillis());
        InputStream in = s.getInputStream();
        StringBuilder head = new StringBuilder();
        while (!head.toString().endsWith("\r\n\r\n")) {
            int b = in.read();
            if (b < 0) {
                fail("the short-body request's connection closed inside the response head: " + head);
            }
            head.append((char) b);
        }
        assertTrue(head.toString().startsWith("HTTP/1.1 200"), "the short-body request's answer: " + head);
        Matcher length = Pattern.compile("(?im)^content-length: *(\\d+)").matcher(head);
        assertTrue(length.find(), "a Content-Length in " + head);
        int body = Integer.parseInt(length.group(1));
        assertEquals(body, in.readNBytes(body).length, "the whole body of the short-body request's answer");
        assertStillOpen(s);
    }

    /** The server closes {@code s} within the generous client timeout: end of stream or a reset. */
    private static void assertClosedByServer(Socket s) throws IOException {
        s.setSoTimeout((int) CLIENT_TIMEOUT.toMillis());
        InputStream in = s.getInputStream();
        try {
            byte[] buf = new byte[4096];
            int n;
            StringBuilder answer = new StringBuilder();
            while ((n = in.read(buf)) > 0) {
                answer.append(new String(buf, 0, n, StandardCharsets.US_ASCII)); // an error reply, if any
            }
            System.out.println("server closed the stalled connection" + (answer.isEmpty() ? "" : " after: " + answer));
        } catch (SocketTimeoutException e) {
            fail("the server did not close the stalled connection within " + CLIENT_TIMEOUT);
        } catch (SocketException reset) {
            System.out.println("server reset the stalled connection: " + reset);
        }
    }
}
