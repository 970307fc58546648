package org.symmem4j.serving.http;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

import io.javalin.Javalin;
import io.javalin.http.Context;
import io.javalin.http.HttpResponseException;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.shade.jackson.databind.JsonNode;
import org.nd4j.shade.jackson.databind.ObjectMapper;
import org.nd4j.shade.jackson.databind.node.ArrayNode;
import org.nd4j.shade.jackson.databind.node.ObjectNode;
import org.symmem4j.serving.ModelRouter;
import org.symmem4j.serving.Prediction;
import org.symmem4j.serving.ServingException;
import org.symmem4j.serving.ServingException.Kind;

/**
 * The HTTP front of a {@link ModelRouter}, on Javalin (Jetty).
 *
 * <ul>
 *   <li>{@code POST /v1/models/{name}:predict} and {@code POST /v1/models/{name}/versions/{v}:predict}: the body is
 *       JSON ({@code {"instances": [[...], ...]}}, answered {@code {"model", "version", "predictions"}}) or a NumPy
 *       .npy array ({@code Content-Type: application/x-npy}, answered as .npy with headers {@code X-Model} and
 *       {@code X-Model-Version}).</li>
 *   <li>{@code GET /health}: 200 while the server runs. {@code GET /ready}: 200 when every model has a current
 *       version, 503 before and after.</li>
 *   <li>{@code GET /v1/models}: the models and their served versions.</li>
 * </ul>
 *
 * Errors are JSON {@code {"error": kind, "message": ...}}: 400 bad payload or shape, 404 unknown model or version,
 * 413 body over the limit, 415 unsupported content type, 503 overloaded or closed (with {@code Retry-After}), 504
 * timeout, 500 a network failure.
 */
public final class ServingHttpServer implements AutoCloseable {

    /**
     * @param host            the interface to bind, e.g. {@code 127.0.0.1}
     * @param port            the port, 0 for any free one
     * @param maxRequestBytes the largest body taken (413 above it)
     * @param timeout         the longest a request is kept open (the router's own timeout answers 504 first)
     */
    public record Options(String host, int port, long maxRequestBytes, Duration timeout) {
        /** Checks the options. */
        public Options {
            Objects.requireNonNull(host, "host");
            Objects.requireNonNull(timeout, "timeout");
            if (port < 0 || port > 65535 || maxRequestBytes < 1 || timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("http options port=" + port + " maxRequestBytes=" + maxRequestBytes
                        + " timeout=" + timeout + " expected port 0..65535, maxRequestBytes >= 1, timeout > 0"
                        + " (fix: pass values in those ranges)");
            }
        }

        /** {@return localhost, any free port, 16 MiB bodies, 30 s} */
        public static Options defaults() {
            return new Options("127.0.0.1", 0, 16L << 20, Duration.ofSeconds(30));
        }

        /** @param p the port @return a copy on that port */
        public Options withPort(int p) {
            return new Options(host, p, maxRequestBytes, timeout);
        }

        /** @param bytes the largest body @return a copy with that limit */
        public Options withMaxRequestBytes(long bytes) {
            return new Options(host, port, bytes, timeout);
        }
    }

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String PREDICT = ":predict";

    private final ModelRouter router;
    private final Options options;
    private final Javalin app;

    private ServingHttpServer(ModelRouter router, Options options) {
        this.router = router;
        this.options = options;
        this.app = Javalin.create(cfg -> {
            cfg.startup.showJavalinBanner = false;
            cfg.http.maxRequestSize = options.maxRequestBytes();
            cfg.http.asyncTimeout = options.timeout().toMillis();
            cfg.jetty.host = options.host();
            cfg.jetty.port = options.port();
            cfg.routes.get("/health", ctx -> ctx.contentType("application/json").result("{\"status\":\"up\"}"));
            cfg.routes.get("/ready", ctx -> {
                boolean ready = router.isReady() && !router.models().isEmpty();
                ctx.status(ready ? 200 : 503).contentType("application/json")
                        .result("{\"ready\":" + ready + ",\"models\":" + JSON.writeValueAsString(router.models()) + "}");
            });
            cfg.routes.get("/v1/models", this::listModels);
            cfg.routes.post("/v1/models/{spec}", ctx -> predict(ctx, ctx.pathParam("spec"), null));
            cfg.routes.post("/v1/models/{name}/versions/{spec}", ctx -> predict(ctx, ctx.pathParam("name"),
                    ctx.pathParam("spec")));
            cfg.routes.exception(ServingException.class, (e, ctx) -> error(ctx, e));
            cfg.routes.exception(HttpResponseException.class, (e, ctx) -> error(ctx, e.getStatus(),
                    e.getStatus() == 413 ? "TOO_LARGE" : "HTTP", e.getMessage() + (e.getStatus() == 413
                            ? " (body over maxRequestBytes=" + options.maxRequestBytes() + "; fix: split the instances"
                            + " over several requests, or start the server with a larger maxRequestBytes)" : "")));
        });
    }

    /**
     * Starts a server in front of {@code router}.
     *
     * @param router  the router (the caller closes it, after this server)
     * @param options where to listen, limits
     * @return the running server
     */
    public static ServingHttpServer start(ModelRouter router, Options options) {
        ServingHttpServer s = new ServingHttpServer(Objects.requireNonNull(router, "router"),
                Objects.requireNonNull(options, "options"));
        s.app.start();
        return s;
    }

    /** {@return the port the server listens on} */
    public int port() {
        return app.port();
    }

    private void listModels(Context ctx) throws Exception {
        ObjectNode out = JSON.createObjectNode();
        for (String m : router.models()) {
            List<Long> served;
            try {
                served = router.servedVersions(m);
            } catch (ServingException e) {
                continue; // undeployed between the two calls: no longer served
            }
            ArrayNode versions = out.putArray(m);
            served.forEach(versions::add);
        }
        ctx.contentType("application/json").result(JSON.writeValueAsString(out));
    }

    private void predict(Context ctx, String first, String second) {
        String spec = second == null ? first : second;
        if (!spec.endsWith(PREDICT)) {
            throw new ServingException(Kind.UNKNOWN_MODEL, "no route POST " + ctx.path() + " (expected"
                    + " /v1/models/{name}:predict or /v1/models/{name}/versions/{v}:predict; fix: end the path with"
                    + " :predict)");
        }
        String value = spec.substring(0, spec.length() - PREDICT.length());
        String model = second == null ? value : first;
        long version = 0;
        if (second != null) {
            try {
                version = Long.parseLong(value);
            } catch (NumberFormatException e) {
                version = -1;
            }
            if (version < 1) {
                throw new ServingException(Kind.BAD_INPUT, "version '" + value + "' expected a positive integer (fix:"
                        + " name a version GET /v1/models lists, or leave out /versions/{v} for the current one)");
            }
        }
        String contentLength = ctx.header("Content-Length");
        if (contentLength != null && Long.parseLong(contentLength.trim()) > options.maxRequestBytes()) {
            // error-message: a sentinel error() turns into the 413 answer, which says expected, found and the fix
            throw new ServingException(Kind.BAD_INPUT, "TOO_LARGE"); // answered 413 below
        }
        String type = ctx.contentType() == null ? "" : ctx.contentType().split(";")[0].trim().toLowerCase();
        boolean npy = type.equals(Npy.MEDIA_TYPE) || type.equals("application/octet-stream");
        if (!npy && !type.equals("application/json")) {
            error(ctx, 415, "UNSUPPORTED_MEDIA_TYPE", "Content-Type '" + type + "' expected application/json or "
                    + Npy.MEDIA_TYPE);
            return;
        }
        byte[] body = ctx.bodyAsBytes();
        INDArray features;
        try {
            features = npy ? Npy.read(body) : fromJson(body);
        } catch (IllegalArgumentException e) {
            // error-message: wraps Npy.read's or fromJson's message, which names the fix
            throw new ServingException(Kind.BAD_INPUT, "bad " + (npy ? ".npy" : "JSON") + " payload: " + e.getMessage());
        }
        CompletableFuture<Prediction> answer = router.predict(model, version, features);
        ctx.future(() -> answer.handle((p, t) -> {
            if (t != null) {
                Throwable cause = t instanceof CompletionException && t.getCause() != null ? t.getCause() : t;
                if (cause instanceof ServingException se) {
                    error(ctx, se);
                } else {
                    error(ctx, 500, "FAILED", cause.toString());
                }
                return null;
            }
            ctx.header("X-Model", p.model()).header("X-Model-Version", Long.toString(p.version()));
            if (npy) {
                ctx.contentType(Npy.MEDIA_TYPE).result(Npy.write(p.output()));
            } else {
                ObjectNode out = JSON.createObjectNode();
                out.put("model", p.model());
                out.put("version", p.version());
                out.set("predictions", toJson(p.output()));
                ctx.contentType("application/json").result(out.toString());
            }
            return null;
        }));
    }

    private static INDArray fromJson(byte[] body) {
        JsonNode root;
        try {
            root = JSON.readTree(new String(body, StandardCharsets.UTF_8));
        } catch (Exception e) {
            throw new IllegalArgumentException("not JSON: " + e.getMessage().lines().findFirst().orElse("")
                    + " (fix: send {\"instances\": [[...], ...]} with Content-Type application/json, or a .npy file"
                    + " with Content-Type " + Npy.MEDIA_TYPE + ")");
        }
        JsonNode instances = root == null ? null : root.get("instances");
        if (instances == null || !instances.isArray() || instances.isEmpty()) {
            throw new IllegalArgumentException("expected {\"instances\": [[...], ...]} with one or more rows, found "
                    + (instances == null ? "no \"instances\"" : instances.isArray() ? "an empty array"
                    : "a " + instances.getNodeType().name().toLowerCase()) + " (fix: put the rows, one array each,"
                    + " under \"instances\")");
        }
        List<Long> shape = new ArrayList<>();
        JsonNode n = instances;
        while (n.isArray()) {
            if (n.isEmpty()) {
                throw new IllegalArgumentException("an empty array at depth " + shape.size() + ", expected one or more"
                        + " entries (fix: send at least one value per row)");
            }
            shape.add((long) n.size());
            n = n.get(0);
        }
        long[] s = shape.stream().mapToLong(Long::longValue).toArray();
        long count = 1;
        for (long d : s) {
            count = Math.multiplyExact(count, d);
        }
        if (count > Integer.MAX_VALUE / 2) {
            throw new IllegalArgumentException("too many numbers: " + count + ", expected at most "
                    + Integer.MAX_VALUE / 2 + " (fix: split the instances over several requests)");
        }
        float[] values = new float[(int) count];
        int[] at = {0};
        flatten(instances, s, 0, values, at, new StringBuilder("instances"));
        return Nd4j.create(values, s, 'c');
    }

    private static void flatten(JsonNode node, long[] shape, int depth, float[] out, int[] at, StringBuilder path) {
        if (depth == shape.length) {
            if (!node.isNumber()) {
                throw new IllegalArgumentException(path + " is " + node.getNodeType().name().toLowerCase()
                        + ", expected a number (fix: send only numbers in the rows)");
            }
            out[at[0]++] = node.floatValue();
            return;
        }
        if (!node.isArray() || node.size() != shape[depth]) {
            throw new IllegalArgumentException(path + " has " + (node.isArray() ? node.size() + " entries" : "no array")
                    + ", expected " + shape[depth] + " (fix: give every row the same shape: the instances must be a"
                    + " rectangular array)");
        }
        for (int i = 0; i < node.size(); i++) {
            int len = path.length();
            path.append('[').append(i).append(']');
            flatten(node.get(i), shape, depth + 1, out, at, path);
            path.setLength(len);
        }
    }

    private static JsonNode toJson(INDArray a) {
        INDArray d = a.castTo(DataType.DOUBLE);
        return toJson(d, new long[0]);
    }

    private static JsonNode toJson(INDArray a, long[] prefix) {
        ArrayNode arr = JSON.createArrayNode();
        long n = a.size(prefix.length);
        for (long i = 0; i < n; i++) {
            long[] idx = java.util.Arrays.copyOf(prefix, prefix.length + 1);
            idx[prefix.length] = i;
            if (idx.length == a.rank()) {
                arr.add(a.getDouble(idx));
            } else {
                arr.add(toJson(a, idx));
            }
        }
        return arr;
    }

    private void error(Context ctx, ServingException e) {
        if ("TOO_LARGE".equals(e.getMessage())) {
            error(ctx, 413, "TOO_LARGE", "request body of Content-Length=" + ctx.header("Content-Length")
                    + " expected at most maxRequestBytes=" + options.maxRequestBytes() + " (fix: split the instances"
                    + " over several requests, or start the server with a larger maxRequestBytes)");
            return;
        }
        int status = switch (e.kind()) {
            case UNKNOWN_MODEL -> 404;
            case BAD_INPUT -> 400;
            case OVERLOADED, CLOSED -> 503;
            case TIMEOUT -> 504;
            case FAILED -> 500;
        };
        if (status == 503) {
            ctx.header("Retry-After", "1");
        }
        error(ctx, status, e.kind().name(), e.getMessage());
    }

    private static void error(Context ctx, int status, String kind, String message) {
        Map<String, String> body = new LinkedHashMap<>();
        body.put("error", kind);
        body.put("message", message);
        try {
            ctx.status(status).contentType("application/json").result(JSON.writeValueAsString(body));
        } catch (Exception e) {
            ctx.status(status).result(kind);
        }
    }

    /** Stops the server (requests in flight are cut). */
    @Override
    public void close() {
        app.stop();
    }
}
