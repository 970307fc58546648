package org.symmem4j.examples;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A private Prometheus server for one test: its own config and TSDB under a temporary directory,
 * listening on a free loopback port (never a system-wide instance, which the Debian package may
 * have started on :9090). Talks to it through the HTTP API with {@link HttpClient}; the JSON
 * answers are read with the few regular expressions below, not a JSON library.
 */
final class PrometheusServer implements AutoCloseable {

    /** One element of an instant vector: its labels and its value. */
    record Sample(Map<String, String> labels, double value) {
        String label(String name) {
            return labels.get(name);
        }
    }

    private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();

    final Process process;
    final Path log;
    final int port;

    private PrometheusServer(Process process, Path log, int port) {
        this.process = process;
        this.log = log;
        this.port = port;
    }

    /** The {@code prometheus} binary on PATH, else Debian's {@code /usr/bin/prometheus}; empty if neither. */
    static Optional<Path> findBinary() {
        List<Path> candidates = new ArrayList<>();
        String path = System.getenv("PATH");
        if (path != null) {
            for (String dir : path.split(File.pathSeparator)) {
                if (!dir.isEmpty()) {
                    candidates.add(Path.of(dir, "prometheus"));
                }
            }
        }
        candidates.add(Path.of("/usr/bin/prometheus"));
        return candidates.stream().filter(p -> Files.isRegularFile(p) && Files.isExecutable(p)).findFirst();
    }

    /** First line of {@code prometheus --version}, for the test log. */
    static String version(Path binary) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(binary.toString(), "--version").redirectErrorStream(true).start();
        try {
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            return out.lines().findFirst().orElse("<no output>");
        } finally {
            if (!p.waitFor(10, TimeUnit.SECONDS)) {
                p.destroyForcibly();
            }
        }
    }

    /** The scrape job of {@link #start}: Prometheus' own {@code job} label on every series it stores. */
    static final String JOB = "symmem4j-it";

    /**
     * Writes {@code dir/prometheus.yml} scraping {@code targets} ("host:port", path /metrics) every
     * second as job {@value #JOB} and starts the server with its TSDB in {@code dir/data}. No
     * {@code honor_labels}: the applications tag their meters {@code application}, which no scrape
     * label overrides.
     */
    static PrometheusServer start(Path binary, Path dir, List<String> targets, Path log) throws IOException {
        Path config = dir.resolve("prometheus.yml");
        Files.writeString(config, """
                global:
                  scrape_interval: 1s
                  scrape_timeout: 1s
                  evaluation_interval: 1s
                scrape_configs:
                  - job_name: %s
                    metrics_path: /metrics
                    static_configs:
                      - targets: [%s]
                """.formatted(JOB, String.join(", ", targets.stream().map(t -> "'" + t + "'").toList())));
        int port = freePort();
        List<String> cmd = List.of(binary.toString(),
                "--config.file=" + config,
                "--web.listen-address=127.0.0.1:" + port,
                "--storage.tsdb.path=" + dir.resolve("data"),
                "--storage.tsdb.retention.time=1h");
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        return new PrometheusServer(p, log, port);
    }

    String baseUrl() {
        return "http://127.0.0.1:" + port;
    }

    String log() {
        try {
            return Files.readString(log);
        } catch (IOException e) {
            return "<no log: " + e + ">";
        }
    }

    /** True once {@code GET /-/ready} answers 200 (TSDB opened, config loaded). */
    boolean ready() {
        try {
            HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(baseUrl() + "/-/ready"))
                    .timeout(Duration.ofSeconds(2)).build(), HttpResponse.BodyHandlers.ofString());
            return r.statusCode() == 200;
        } catch (IOException e) {
            return false; // not listening yet
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /**
     * {@code GET /api/v1/query?query=promql} at the current time: the instant vector it returns.
     * A non-success status, a non-vector result or an answer this reader cannot fully parse throws.
     */
    List<Sample> query(String promql) throws IOException, InterruptedException {
        URI uri = URI.create(baseUrl() + "/api/v1/query?query=" + URLEncoder.encode(promql, StandardCharsets.UTF_8));
        HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(5)).build(),
                HttpResponse.BodyHandlers.ofString());
        return parseVector(promql, r.statusCode(), r.body());
    }

    // The API answers (Prometheus 2.x, compact JSON):
    //   {"status":"success","data":{"resultType":"vector","result":[
    //       {"metric":{"__name__":"x","algorithm":"TWO_SHOT"},"value":[1700000000.123,"96"]}, ...]}}
    //   {"status":"error","errorType":"bad_data","error":"1:5: parse error: ..."}
    // Sample values are strings ("96", "0.25", "NaN", "+Inf"). Label values here never contain
    // braces, so a sample's label object is the text between one '{' and the next '}'; whitespace
    // is allowed everywhere JSON allows it. parseVector counts the "metric" keys and fails loudly if
    // the sample pattern matched fewer, so a format this reader does not understand is not mistaken
    // for an empty result.
    private static final Pattern STATUS = Pattern.compile("\"status\"\\s*:\\s*\"(\\w+)\"");
    private static final Pattern RESULT_TYPE = Pattern.compile("\"resultType\"\\s*:\\s*\"(\\w+)\"");
    private static final Pattern ERROR = Pattern.compile("\"error\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"");
    private static final Pattern SAMPLE = Pattern.compile(
            "\\{\\s*\"metric\"\\s*:\\s*\\{([^{}]*)\\}\\s*,\\s*\"value\"\\s*:\\s*\\[\\s*[-+0-9.eE]+\\s*,\\s*\"([^\"]*)\"\\s*\\]\\s*\\}");
    private static final Pattern METRIC_KEY = Pattern.compile("\"metric\"\\s*:");
    private static final Pattern JSON_PAIR = Pattern.compile("\"((?:[^\"\\\\]|\\\\.)*)\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"");

    static List<Sample> parseVector(String promql, int httpStatus, String body) {
        Matcher status = STATUS.matcher(body);
        if (!status.find() || !status.group(1).equals("success")) {
            Matcher error = ERROR.matcher(body);
            throw new IllegalStateException("query failed: query=" + promql + " http=" + httpStatus + " error="
                    + (error.find() ? unescape(error.group(1)) : body));
        }
        Matcher type = RESULT_TYPE.matcher(body);
        if (!type.find() || !type.group(1).equals("vector")) {
            throw new IllegalStateException("expected resultType=vector for query=" + promql + ", found body=" + body);
        }
        List<Sample> samples = new ArrayList<>();
        Matcher m = SAMPLE.matcher(body);
        while (m.find()) {
            Map<String, String> labels = new LinkedHashMap<>();
            Matcher pair = JSON_PAIR.matcher(m.group(1));
            while (pair.find()) {
                labels.put(unescape(pair.group(1)), unescape(pair.group(2)));
            }
            samples.add(new Sample(Map.copyOf(labels), parseValue(m.group(2))));
        }
        long metricKeys = METRIC_KEY.matcher(body).results().count();
        if (metricKeys != samples.size()) {
            throw new IllegalStateException("could not parse every sample: metric keys=" + metricKeys + " parsed="
                    + samples.size() + " query=" + promql + " body=" + body);
        }
        return List.copyOf(samples);
    }

    /** Prometheus writes special values as NaN, +Inf and -Inf. */
    static double parseValue(String s) {
        return switch (s) {
            case "+Inf", "Inf" -> Double.POSITIVE_INFINITY;
            case "-Inf" -> Double.NEGATIVE_INFINITY;
            default -> Double.parseDouble(s); // also "NaN"
        };
    }

    /** Undoes JSON string escapes. */
    static String unescape(String s) {
        if (s.indexOf('\\') < 0) {
            return s;
        }
        StringBuilder b = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c != '\\' || i + 1 == s.length()) {
                b.append(c);
                continue;
            }
            char e = s.charAt(++i);
            switch (e) {
                case 'n' -> b.append('\n');
                case 't' -> b.append('\t');
                case 'r' -> b.append('\r');
                case 'b' -> b.append('\b');
                case 'f' -> b.append('\f');
                case 'u' -> {
                    b.append((char) Integer.parseInt(s.substring(i + 1, i + 5), 16));
                    i += 4;
                }
                default -> b.append(e); // \" \\ \/
            }
        }
        return b.toString();
    }

    /** SIGTERM (Prometheus flushes and exits), then SIGKILL if it has not exited within 10 s or on interrupt. */
    @Override
    public void close() {
        process.destroy();
        try {
            if (!process.waitFor(10, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                process.waitFor(10, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        }
    }

    /** A loopback port free now (the server binds it right after; a race with another process fails its start loudly). */
    private static int freePort() {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new IllegalStateException("no free loopback port for Prometheus: " + e.getMessage(), e);
        }
    }
}
