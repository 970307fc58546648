package org.symmem4j.benchmarks;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.serving.ModelRouter;
import org.symmem4j.serving.ModelSpec;
import org.symmem4j.serving.Prediction;
import org.symmem4j.serving.RouterOptions;
import org.symmem4j.serving.ServingException;
import org.symmem4j.serving.http.Npy;
import org.symmem4j.serving.http.ServingHttpServer;
import org.symmem4j.serving.weights.SharedWeights;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Hot swap under load (issue #34's "0 failed requests in 10,000"): closed-loop client threads send a fixed number of
 * requests for one model (an MLP 784-256-256-10, 1-3 rows each) through the {@link ModelRouter} (mode {@code router})
 * or through its HTTP front with .npy bodies (mode {@code http}), while a swapper thread publishes a new version
 * every {@code --swap-every} answered requests and rolls back instead on every {@code --rollback-every}-th swap.
 *
 * <p>Every version has weights of its own seed, so its outputs for the bench's inputs are known in advance and
 * distinct (the run refuses to start when two versions' outputs for an input are closer than 10x the tolerance,
 * which would let a mix pass). Each answer is checked row by row against the outputs of the version it names: an
 * answer with a row off by more than the tolerance is a <b>mix</b> (the report says whose outputs the row has);
 * a request refused as overloaded (router queue full, HTTP 503) is counted apart from the other <b>failures</b>.
 *
 * <p>Memory: the first deploy that retires a version does so while the bench holds a {@link ModelRouter.Lease} on
 * it: the version must still be there after the deploy, and gone once the lease is closed. At the end every
 * retired version must be freed and exactly two (the current one and the one kept for rollback) left.
 *
 * <p>Latency: a request whose [send, answer] interval overlaps a swap (from the deploy or rollback call's start to
 * {@code --window-ms} after its return, when the first batches build their network objects over the new version)
 * counts as "during swaps", any other as "without swaps": both percentiles come from the same run.
 *
 * <pre>
 *   HotSwapBench [--requests 10000] [--clients 8] [--workers 2] [--swap-every 500] [--rollback-every 4]
 *                [--modes router,http] [--window-ms 50] [--out report.md]
 * </pre>
 */
public final class HotSwapBench {

    @Command(name = "HotSwapBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Hot swap and rollback under load through the router and its HTTP"
                    + " front: failures, overloaded answers and mixed versions per request, freed versions, and"
                    + " p50/p99 latency during swaps and without, in the same run.")
    static final class Flags {
        @Option(names = "--requests", paramLabel = "N", description = "requests per mode")
        int requests = 10_000;
        @Option(names = "--clients", paramLabel = "C", description = "closed-loop client threads")
        int clients = 8;
        @Option(names = "--workers", paramLabel = "W", description = "router worker threads")
        int workers = 2;
        @Option(names = "--max-batch", paramLabel = "B", description = "the router's maxBatch (rows)")
        int maxBatch = 16;
        @Option(names = "--swap-every", paramLabel = "K", description = "answered requests between swaps")
        int swapEvery = 500;
        @Option(names = "--rollback-every", paramLabel = "R", description = "every R-th swap is a rollback")
        int rollbackEvery = 4;
        @Option(names = "--window-ms", paramLabel = "MS", description = "after a swap returns, how long requests"
                + " still count as during the swap")
        int windowMillis = 50;
        @Option(names = "--modes", split = ",", paramLabel = "MODE", description = "router and/or http")
        List<String> modes = List.of("router", "http");
        @Option(names = "--out", paramLabel = "FILE", description = "also write the report as markdown there")
        Path out;
        @Option(names = "--commit", paramLabel = "C", description = "the commit, for the report")
        String commit = "unknown";
        @Option(names = "--command", paramLabel = "CMD", description = "the command line, for the report")
        String command = "HotSwapBench";
    }

    /** Absolute tolerance of one output (softmax probabilities): batch composition changes float rounding only. */
    static final double TOLERANCE = 1e-4;
    /** Distinct inputs the clients draw rows from. */
    static final int INPUTS = 16;
    static final int FEATURES = 784;
    static final String MODEL = "mlp";

    private static final byte OK = 1;
    private static final byte MIX = 2;
    private static final byte FAILED = 3;
    private static final byte OVERLOADED = 4;

    private HotSwapBench() {
    }

    /** The settings one mode runs with. */
    record Settings(int requests, int clients, int workers, int maxBatch, int swapEvery, int rollbackEvery,
                    long windowNanos) {
        Settings {
            Cli.positive("--requests", requests);
            Cli.positive("--clients", clients);
            Cli.positive("--workers", workers);
            Cli.positive("--max-batch", maxBatch);
            Cli.positive("--swap-every", swapEvery);
            Cli.positive("--rollback-every", rollbackEvery);
            if ((requests - 1) / swapEvery < rollbackEvery) {
                throw new IllegalArgumentException("--requests=" + requests + " --swap-every=" + swapEvery
                        + " --rollback-every=" + rollbackEvery + " make " + (requests - 1) / swapEvery + " swaps,"
                        + " expected at least " + rollbackEvery + " so that one is a rollback (fix: a smaller"
                        + " --swap-every or --rollback-every, or more --requests)");
            }
        }

        int swaps() {
            return (requests - 1) / swapEvery;
        }

        int deploys() {
            return 1 + swaps() - swaps() / rollbackEvery;
        }
    }

    /** One swap: when, what, how long, and how many versions the weights held right after it. */
    record Swap(int index, String kind, long version, long startNanos, long endNanos, int residentAfter,
                int answeredAtStart) {
    }

    /** One mode's result. */
    record Result(String mode, int requests, int ok, int mixes, int failures, int overloaded, List<Swap> swaps,
                  int versionsPublished, int freedVersions, int residentAtEnd, boolean leaseHeldRetired,
                  boolean leaseReleaseFreed, double seconds, long[] latencyDuring, long[] latencyWithout,
                  Map<Long, Integer> answersPerVersion, List<String> firstProblems) {

        boolean passed() {
            return ok == requests && mixes == 0 && failures == 0 && overloaded == 0 && leaseHeldRetired
                    && leaseReleaseFreed && freedVersions == versionsPublished - 2 && residentAtEnd == 2;
        }
    }

    /** The versions' parameters and each version's outputs for the {@link #INPUTS} inputs. */
    record Versions(INDArray inputs, List<INDArray> params, List<INDArray> outputs) {

        /** Version v (from 1) is seed 1000 + v: its parameters and its outputs, computed once up front. */
        static Versions make(int count) {
            Nd4j.getRandom().setSeed(7);
            INDArray inputs = Nd4j.rand(DataType.FLOAT, INPUTS, FEATURES);
            List<INDArray> params = new ArrayList<>();
            List<INDArray> outputs = new ArrayList<>();
            for (int v = 1; v <= count; v++) {
                MultiLayerNetwork net = new MultiLayerNetwork(ServingBench.mlp(1000 + v));
                net.init();
                params.add(net.params().dup());
                outputs.add(net.output(inputs));
            }
            Versions versions = new Versions(inputs, params, outputs);
            versions.checkDistinct();
            return versions;
        }

        /** Refuses versions a mix could hide between: every input's outputs differ by more than 10x the tolerance. */
        void checkDistinct() {
            for (int a = 0; a < outputs.size(); a++) {
                for (int b = a + 1; b < outputs.size(); b++) {
                    for (int i = 0; i < INPUTS; i++) {
                        double d = maxAbsDiff(outputs.get(a).getRow(i), outputs.get(b).getRow(i));
                        if (d <= 10 * TOLERANCE) {
                            throw new IllegalStateException("versions " + (a + 1) + " and " + (b + 1) + " give input "
                                    + i + " outputs " + d + " apart, expected more than " + 10 * TOLERANCE
                                    + " (a mix would pass unseen; fix: use other seeds or inputs)");
                        }
                    }
                }
            }
        }

        /**
         * Checks an answer's rows against the version it names.
         *
         * @return null when every row is that version's output; otherwise what the first wrong row has
         */
        String check(long version, int[] picks, INDArray output) {
            if (version < 1 || version > outputs.size()) {
                return "answer names version=" + version + ", never deployed";
            }
            if (output.rows() != picks.length) {
                return "version=" + version + " answered " + output.rows() + " rows for " + picks.length;
            }
            for (int r = 0; r < picks.length; r++) {
                INDArray got = output.getRow(r);
                if (maxAbsDiff(got, outputs.get((int) version - 1).getRow(picks[r])) > TOLERANCE) {
                    List<Integer> whose = new ArrayList<>();
                    for (int v = 1; v <= outputs.size(); v++) {
                        if (maxAbsDiff(got, outputs.get(v - 1).getRow(picks[r])) <= TOLERANCE) {
                            whose.add(v);
                        }
                    }
                    return "answer names version=" + version + " but row " + r + " (input " + picks[r] + ") is "
                            + (whose.isEmpty() ? "no version's output" : "the output of version(s) " + whose);
                }
            }
            return null;
        }
    }

    static double maxAbsDiff(INDArray a, INDArray b) {
        return a.castTo(DataType.DOUBLE).sub(b.castTo(DataType.DOUBLE)).amaxNumber().doubleValue();
    }

    /** Sends one request, returns the answer's version and output, or throws. */
    @FunctionalInterface
    interface Call {
        Prediction send(INDArray features) throws Exception;
    }

    /** A refusal the client counts as overloaded (router queue full, HTTP 503). */
    static final class Overloaded extends Exception {
        Overloaded(String message) {
            super(message);
        }
    }

    public static void main(String[] args) throws Exception {
        Flags f = new Flags();
        Settings s = Cli.parse(f, args, HotSwapBench::settings);
        Versions versions = Versions.make(s.deploys());
        List<Result> results = new ArrayList<>();
        for (String mode : f.modes) {
            results.add(run(s, mode, versions));
        }
        String report = report(f, s, results);
        System.out.print(report);
        if (f.out != null) {
            Files.writeString(f.out, report, StandardCharsets.UTF_8);
            System.err.println("wrote " + f.out);
        }
        if (!results.stream().allMatch(Result::passed)) {
            System.exit(1);
        }
    }

    static Settings settings(Flags f) {
        for (String mode : f.modes) {
            if (!mode.equals("router") && !mode.equals("http")) {
                throw new IllegalArgumentException("--modes entry '" + mode + "' expected router or http (fix: e.g."
                        + " --modes router,http)");
            }
        }
        if (f.windowMillis < 0) {
            throw new IllegalArgumentException("--window-ms=" + f.windowMillis + " expected >= 0 (fix: e.g. 50)");
        }
        return new Settings(f.requests, f.clients, f.workers, f.maxBatch, f.swapEvery, f.rollbackEvery,
                f.windowMillis * 1_000_000L);
    }

    /** Runs one mode: a fresh router (and server), the load, the swaps, the checks. */
    static Result run(Settings s, String mode, Versions versions) throws Exception {
        long paramBytes = versions.params().get(0).length() * 4;
        RouterOptions options = RouterOptions.defaults().withWorkers(s.workers()).withBatching(s.maxBatch(),
                Duration.ZERO).withQueueCapacity(1024).withRequestTimeout(Duration.ofSeconds(60));
        // room for 6 versions: the current one, the one kept, and retired ones whose last batch is still running;
        // a retired version not freed in time makes a deploy fail, which the run reports
        try (SharedWeights weights = SharedWeights.create(InJvmWorld.create(1).join(0), 0, 6 * paramBytes + (1 << 20), 8);
             ModelRouter router = new ModelRouter(weights, options, null)) {
            ModelSpec spec = ModelSpec.of(ServingBench.mlp(1001), FEATURES);
            router.deploy(MODEL, spec, versions.params().get(0));
            if ("http".equals(mode)) {
                try (ServingHttpServer server = ServingHttpServer.start(router, ServingHttpServer.Options.defaults())) {
                    return load(s, mode, versions, router, weights, spec, httpCall(server.port()));
                }
            }
            return load(s, mode, versions, router, weights, spec, x -> {
                try {
                    return router.predict(MODEL, x).get();
                } catch (ExecutionException e) {
                    if (e.getCause() instanceof ServingException se && se.kind() == ServingException.Kind.OVERLOADED) {
                        throw new Overloaded(se.getMessage());
                    }
                    throw e;
                }
            });
        }
    }

    private static Call httpCall(int port) {
        HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofSeconds(10)).build();
        URI uri = URI.create("http://127.0.0.1:" + port + "/v1/models/" + MODEL + ":predict");
        return x -> {
            HttpResponse<byte[]> r = client.send(HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(60))
                    .header("Content-Type", Npy.MEDIA_TYPE).POST(HttpRequest.BodyPublishers.ofByteArray(Npy.write(x)))
                    .build(), HttpResponse.BodyHandlers.ofByteArray());
            if (r.statusCode() == 503) {
                throw new Overloaded(new String(r.body(), StandardCharsets.UTF_8));
            }
            if (r.statusCode() != 200) {
                throw new IOException("HTTP " + r.statusCode() + " from " + uri + ", expected 200 or 503: "
                        + new String(r.body(), StandardCharsets.UTF_8) + " (fix: act on the server's error above; it"
                        + " counts as a failed request)");
            }
            long version = Long.parseLong(r.headers().firstValue("X-Model-Version").orElse("-1"));
            return new Prediction(MODEL, version, Npy.read(r.body()));
        };
    }

    private static Result load(Settings s, String mode, Versions versions, ModelRouter router, SharedWeights weights,
                               ModelSpec spec, Call call) throws Exception {
        int n = s.requests();
        long[] sent = new long[n];
        long[] answered = new long[n];
        byte[] outcome = new byte[n];
        long[] versionOf = new long[n];
        AtomicInteger tickets = new AtomicInteger();
        AtomicInteger done = new AtomicInteger();
        List<String> problems = Collections.synchronizedList(new ArrayList<>());
        warmUp(call, versions);

        List<Swap> swaps = new ArrayList<>();
        AtomicReference<Throwable> swapperFailure = new AtomicReference<>();
        AtomicBoolean clientsLeft = new AtomicBoolean();
        boolean[] lease = new boolean[2]; // held a retired version; freed once released
        int[] published = {1};
        Thread swapper = Thread.ofPlatform().name("hot-swap-swapper").start(() -> {
            try {
                List<Long> retired = new ArrayList<>();
                for (int k = 1; k <= s.swaps(); k++) {
                    while (done.get() < k * s.swapEvery() && !clientsLeft.get()) {
                        LockSupport.parkNanos(50_000);
                    }
                    int answeredAtStart = done.get();
                    boolean rollback = k % s.rollbackEvery() == 0;
                    List<Long> before = router.servedVersions(MODEL);
                    long retires = !rollback && before.size() == 2 ? before.get(1) : 0;
                    ModelRouter.Lease held = retires != 0 && retired.isEmpty() ? router.lease(MODEL, retires) : null;
                    long start = System.nanoTime();
                    long version = rollback ? router.rollback(MODEL)
                            : router.deploy(MODEL, spec, versions.params().get(published[0]));
                    long end = System.nanoTime();
                    if (!rollback) {
                        published[0]++;
                    }
                    if (retires != 0) {
                        retired.add(retires);
                    }
                    if (held != null) {
                        lease[0] = weights.open(MODEL, retires) != null; // still read: must still be there
                        held.close();
                        lease[1] = weights.open(MODEL, retires) == null; // its last reader left: freed
                    }
                    swaps.add(new Swap(k, rollback ? "rollback" : "deploy", version, start, end,
                            weights.publishedVersions(), answeredAtStart));
                }
            } catch (Throwable t) {
                swapperFailure.set(t);
            }
        });

        long begin = System.nanoTime();
        List<Thread> clients = new ArrayList<>();
        for (int c = 0; c < s.clients(); c++) {
            Random random = new Random(c);
            clients.add(Thread.ofPlatform().name("hot-swap-client-" + c).start(() -> {
                for (int t = tickets.getAndIncrement(); t < n; t = tickets.getAndIncrement()) {
                    int rows = 1 + random.nextInt(3);
                    int[] picks = random.ints(rows, 0, INPUTS).toArray();
                    INDArray features = Nd4j.create(DataType.FLOAT, rows, FEATURES);
                    for (int r = 0; r < rows; r++) {
                        features.putRow(r, versions.inputs().getRow(picks[r]));
                    }
                    sent[t] = System.nanoTime();
                    try {
                        Prediction p = call.send(features);
                        answered[t] = System.nanoTime();
                        versionOf[t] = p.version();
                        String wrong = versions.check(p.version(), picks, p.output());
                        outcome[t] = wrong == null ? OK : MIX;
                        if (wrong != null && problems.size() < 5) {
                            problems.add("request " + t + ": " + wrong);
                        }
                    } catch (Overloaded e) {
                        answered[t] = System.nanoTime();
                        outcome[t] = OVERLOADED;
                    } catch (Exception e) {
                        answered[t] = System.nanoTime();
                        outcome[t] = FAILED;
                        if (problems.size() < 5) {
                            problems.add("request " + t + " failed: " + e);
                        }
                    }
                    done.incrementAndGet();
                }
            }));
        }
        for (Thread t : clients) {
            t.join();
        }
        double seconds = (System.nanoTime() - begin) / 1e9;
        clientsLeft.set(true); // a client that died early must not leave the swapper waiting
        swapper.join();
        if (swapperFailure.get() != null) {
            throw new IllegalStateException(mode + ": the swapper failed after " + swaps.size() + " of " + s.swaps()
                    + " swaps (fix: act on the cause)", swapperFailure.get());
        }
        // the last batches on a retired version may still be leaving: give them a moment, then count
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (router.freedVersions() < published[0] - 2 && System.nanoTime() < deadline) {
            Thread.sleep(5);
        }
        int[] counts = new int[5];
        Map<Long, Integer> perVersion = new TreeMap<>();
        List<Long> during = new ArrayList<>();
        List<Long> without = new ArrayList<>();
        for (int t = 0; t < n; t++) {
            counts[outcome[t]]++;
            if (outcome[t] == OK) {
                perVersion.merge(versionOf[t], 1, Integer::sum);
            }
            boolean overlaps = false;
            for (Swap w : swaps) {
                overlaps |= sent[t] <= w.endNanos() + s.windowNanos() && answered[t] >= w.startNanos();
            }
            (overlaps ? during : without).add(answered[t] - sent[t]);
        }
        return new Result(mode, n, counts[OK], counts[MIX], counts[FAILED], counts[OVERLOADED], List.copyOf(swaps),
                published[0], router.freedVersions(), weights.publishedVersions(), lease[0], lease[1], seconds,
                sorted(during), sorted(without), perVersion, List.copyOf(problems));
    }

    /** A few requests before the clock starts (class loading, the first network objects, HTTP connections). */
    private static void warmUp(Call call, Versions versions) throws Exception {
        for (int i = 0; i < 50; i++) {
            Prediction p = call.send(versions.inputs().getRow(i % INPUTS, true));
            String wrong = versions.check(p.version(), new int[] {i % INPUTS}, p.output());
            if (wrong != null) {
                throw new IllegalStateException("warm-up answer wrong before any swap: " + wrong + " (fix: the"
                        + " router or the bench computes outputs differently; compare ModelSpec with ServingBench.mlp)");
            }
        }
    }

    private static long[] sorted(List<Long> values) {
        long[] a = values.stream().mapToLong(Long::longValue).toArray();
        Arrays.sort(a);
        return a;
    }

    static double percentileMicros(long[] sorted, double q) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        return sorted[Math.min(sorted.length - 1, (int) Math.floor(sorted.length * q))] / 1e3;
    }

    static String report(Flags f, Settings s, List<Result> results) {
        StringBuilder b = new StringBuilder();
        b.append("# Hot swap under load\n\n");
        b.append(String.format(Locale.ROOT, "commit %s; command: `%s`; %d cores (availableProcessors)%n%n", f.commit,
                f.command, Runtime.getRuntime().availableProcessors()));
        b.append(String.format(Locale.ROOT, "Model: MLP 784-256-256-10, float. %d client threads (closed loop, 1-3 rows"
                + " per request), router workers=%d maxBatch=%d maxWait=0. A swap every %d answered requests, every"
                + " %d-th swap a rollback. A request counts as during a swap when it overlaps a deploy/rollback call"
                + " or the %d ms after it. Tolerance per output %.0e; versions' outputs for every input differ by"
                + " more than 10x that.%n%n", s.clients(), s.workers(), s.maxBatch(), s.swapEvery(),
                s.rollbackEvery(), s.windowNanos() / 1_000_000, TOLERANCE));
        b.append("| mode | requests | ok | mixes | failures | overloaded | swaps (deploy/rollback) | versions published |"
                + " freed | left | lease kept / freed | req/s | p50 during swaps (µs) | p99 during swaps (µs) |"
                + " p50 without (µs) | p99 without (µs) | requests during / without | verdict |\n");
        b.append("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---|\n");
        for (Result r : results) {
            long rollbacks = r.swaps().stream().filter(w -> w.kind().equals("rollback")).count();
            b.append(String.format(Locale.ROOT, "| %s | %d | %d | %d | %d | %d | %d (%d/%d) | %d | %d | %d | %s / %s |"
                    + " %.0f | %.0f | %.0f | %.0f | %.0f | %d / %d | %s |%n", r.mode(), r.requests(), r.ok(), r.mixes(),
                    r.failures(), r.overloaded(), r.swaps().size(), r.swaps().size() - rollbacks, rollbacks,
                    r.versionsPublished(), r.freedVersions(), r.residentAtEnd(), r.leaseHeldRetired(),
                    r.leaseReleaseFreed(), r.requests() / r.seconds(), percentileMicros(r.latencyDuring(), 0.5),
                    percentileMicros(r.latencyDuring(), 0.99), percentileMicros(r.latencyWithout(), 0.5),
                    percentileMicros(r.latencyWithout(), 0.99), r.latencyDuring().length, r.latencyWithout().length,
                    r.passed() ? "PASS" : "FAIL"));
        }
        b.append("\nPASS: every request answered by exactly one whole version (ok = requests: 0 mixes, 0 failures, 0"
                + " overloaded); the leased retired version kept while read and freed when the lease closed; every"
                + " retired version freed at the end (freed = published - 2), two left (current and rollback).\n");
        for (Result r : results) {
            b.append(String.format(Locale.ROOT, "%n## %s: swaps%n%n answers per version: %s%n", r.mode(),
                    r.answersPerVersion()));
            if (!r.firstProblems().isEmpty()) {
                b.append("\nfirst problems:\n");
                r.firstProblems().forEach(p -> b.append("- ").append(p).append('\n'));
            }
            b.append("\n| swap | kind | version after | at answered | call (µs) | versions held after |\n"
                    + "|---:|---|---:|---:|---:|---:|\n");
            for (Swap w : r.swaps()) {
                b.append(String.format(Locale.ROOT, "| %d | %s | %d | %d | %.0f | %d |%n", w.index(), w.kind(),
                        w.version(), w.answeredAtStart(), (w.endNanos() - w.startNanos()) / 1e3, w.residentAfter()));
            }
        }
        return b.toString();
    }
}
