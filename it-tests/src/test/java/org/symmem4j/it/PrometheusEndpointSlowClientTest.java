package org.symmem4j.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
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
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.symmem4j.dl4j.PrometheusEndpoint;

/**
 * The metrics endpoint against clients that connect and then stall: half-sent request lines, headers
 * without the blank line that ends them, a body shorter than its Content-Length, and a connection
 * that sends nothing. Scrapes and health checks must still be answered while they hang on, and the
 * server must drop a stalled request by itself. Assertions are functional (an answer arrives within
 * a generous client timeout, a connection is closed by the server), never a measured time.
 */
class PrometheusEndpointSlowClientTest {

    private static final Duration CLIENT_TIMEOUT = Duration.ofSeconds(30);
    private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(CLIENT_TIMEOUT).build();

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

    /** Starts without endpoint threads of earlier tests, which the thread counting below would see. */
    @BeforeEach
    void noEndpointThreadsLeft() throws InterruptedException {
        awaitNoEndpointThreads();
    }

    @AfterEach
    void closeAll() throws IOException, InterruptedException {
        for (Socket s : clients) {
            s.close();
        }
        if (endpoint != null) {
            endpoint.close();
        }
        awaitNoEndpointThreads(); // close() ends every thread of the endpoint, stalled requests' included
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
        awaitThreadsReadingRequests(HALF_SENT.size());

        for (int i = 0; i < 3; i++) {
            HttpResponse<String> metrics = get(endpoint.url());
            assertEquals(200, metrics.statusCode(), "GET " + endpoint.url() + " while " + HALF_SENT.size()
                    + " half-sent requests and a short body hold threads");
            assertTrue(metrics.body().contains("symmem_endpoint_test_total 1.0"),
                    "the registry's counter in the scrape:\n" + metrics.body());
            HttpResponse<String> health = get(endpoint.healthUrl());
            assertEquals(200, health.statusCode(), "GET " + endpoint.healthUrl());
        }
        for (Socket s : halfSent) {
            assertStillOpen(s);
        }
        assertEquals(0, endpoint.timedOutRequests(), "no request reached the 10-minute timeout");
    }

    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void theServerDropsAStalledRequestAndServesTheNextOnTheSameThread() throws Exception {
        PrometheusMeterRegistry registry = registryWithOneCounter();
        // one thread: the stalled request holds it until the server drops it; the scrape waits in the queue
        endpoint = PrometheusEndpoint.builder(registry).threads(1).requestTimeout(Duration.ofSeconds(2)).start();
        Socket stalled = send(connect(), HALF_SENT.get(1));
        awaitThreadsReadingRequests(1);

        HttpResponse<String> metrics = get(endpoint.url());
        assertEquals(200, metrics.statusCode(), "GET " + endpoint.url() + " after the stalled request");
        assertTrue(metrics.body().contains("symmem_endpoint_test_total"), metrics.body());

        assertClosedByServer(stalled);
        assertTrue(endpoint.timedOutRequests() >= 1,
                "the endpoint's own deadline dropped the request: timedOutRequests=" + endpoint.timedOutRequests());
        // the thread that was interrupted serves again (its interrupt did not leak into the next request)
        for (int i = 0; i < 3; i++) {
            assertEquals(200, get(endpoint.url()).statusCode(), "GET " + endpoint.url() + " #" + i);
        }
    }

    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void withEveryThreadHeldAndNoQueueAConnectionIsClosedAtOnceNotLeftHanging() throws Exception {
        PrometheusMeterRegistry registry = registryWithOneCounter();
        endpoint = PrometheusEndpoint.builder(registry).threads(2).queuedRequests(0)
                .requestTimeout(Duration.ofMinutes(10)).start();
        List<Socket> stalled = List.of(send(connect(), HALF_SENT.get(0)), send(connect(), HALF_SENT.get(1)));
        awaitThreadsReadingRequests(2);

        IOException refused = assertThrows(IOException.class, () -> get(endpoint.url()),
                "both threads are held and nothing may queue: the server closes the connection");
        System.out.println("refused while full: " + refused);
        for (Socket s : stalled) {
            assertStillOpen(s);
        }
        endpoint.close();
        endpoint = null;
        for (Socket s : stalled) {
            assertClosedByServer(s); // close() ends the stalled exchanges too
        }
    }

    // ---------------------------------------------------------------------------------------------

    private static PrometheusMeterRegistry registryWithOneCounter() {
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        Counter.builder("symmem.endpoint.test").register(registry).increment();
        return registry;
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

    /**
     * Waits until {@code n} of the endpoint's threads are inside the JDK server's request parsing,
     * i.e. each half-sent request holds a thread (the server hands a connection to a thread at its
     * first byte).
     */
    private static void awaitThreadsReadingRequests(int n) throws InterruptedException {
        long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
        int found = 0;
        while (System.nanoTime() < deadline) {
            found = 0;
            for (var e : Thread.getAllStackTraces().entrySet()) {
                if (e.getKey().getName().startsWith("symmem4j-metrics-http-") && Arrays.stream(e.getValue())
                        .anyMatch(f -> f.getClassName().startsWith("sun.net.httpserver.Request"))) {
                    found++;
                }
            }
            if (found >= n) {
                return;
            }
            Thread.sleep(20);
        }
        fail("expected " + n + " endpoint threads reading a request, found " + found + " after " + CLIENT_TIMEOUT);
    }

    private static List<String> endpointThreads() {
        return Thread.getAllStackTraces().keySet().stream().map(Thread::getName)
                .filter(n -> n.startsWith("symmem4j-metrics-http-")).toList();
    }

    private static void awaitNoEndpointThreads() throws InterruptedException {
        long deadline = System.nanoTime() + CLIENT_TIMEOUT.toNanos();
        while (!endpointThreads().isEmpty()) {
            if (System.nanoTime() > deadline) {
                fail("metrics endpoint threads still alive " + CLIENT_TIMEOUT + " after close(): " + endpointThreads());
            }
            Thread.sleep(20);
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
        }
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
