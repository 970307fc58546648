package org.symmem4j.benchmarks;

import java.awt.BasicStroke;
import java.awt.Color;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.OptionalDouble;
import java.util.TreeMap;
import java.util.function.Predicate;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.XYSeries;
import org.knowm.xchart.style.Styler;
import org.knowm.xchart.style.markers.SeriesMarkers;
import org.symmem4j.examples.Cli;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Draws the benchmark plots (PNG, headless) from the raw CSVs in {@code bench/results/}: DL4J
 * data-parallel throughput against the single model and ParallelWrapper per worker count; the
 * pipeline's measured bubble against the simulator's; the host all-reduce against Open MPI; the GPU
 * all-reduce against NCCL; ZeRO's optimizer-state and gradient bytes per worker against the worker
 * count. Every input is a CSV committed beside the markdown report it belongs to
 * ({@code #} lines are comments saying where the numbers came from). Run through
 * {@code bench/plots.sh}.
 */
public final class Plots {

    private static final Color[] PALETTE = {new Color(0x1f77b4), new Color(0xd62728), new Color(0x2ca02c),
        new Color(0x9467bd), new Color(0xff7f0e), new Color(0x8c564b)};
    private static final BasicStroke DASHED = new BasicStroke(2f, BasicStroke.CAP_BUTT, BasicStroke.JOIN_MITER, 10f,
            new float[] {6f, 4f}, 0f);
    private static final BasicStroke SOLID = new BasicStroke(2f);

    @Command(name = "Plots", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "Draws the benchmark plots (PNG) from the raw CSVs in the results directory.")
    static final class Flags {
        @Option(names = "--results", paramLabel = "DIR", description = "directory holding the raw CSVs")
        Path results = Path.of("bench", "results");
        @Option(names = "--out", paramLabel = "DIR", description = "directory the PNGs are written to")
        Path out = Path.of("docs", "plots");
    }

    private Plots() {
    }

    public static void main(String[] args) throws IOException {
        System.setProperty("java.awt.headless", "true");
        Flags f = Cli.parse(new Flags(), args);
        Files.createDirectories(f.out);
        List<Path> written = new ArrayList<>();
        // DL4J data parallelism, 16-core H100 host: each model from the one labelled run that measured all its
        // worker counts (the ScalingBench step names: main for the MLP and CNN, small for the small MLP)
        Path scaling = f.results.resolve("2026-11-23-cpu-scaling-h100-host.csv");
        written.add(dataParallel(scaling, "main", "mlp-medium", "MLP, 2.07M parameters", f.out));
        written.add(dataParallel(scaling, "main", "cnn", "CNN, 431k parameters", f.out));
        written.add(dataParallel(scaling, "small", "mlp-small", "MLP, 85k parameters", f.out));
        written.add(pipelineBubbles(f.results.resolve("2026-11-23-pipeline-speed-16core-bubbles.csv"), f.out));
        written.add(hostAllReduce(f.results.resolve("2026-11-23-host-allreduce-vs-mpi-h100-host.csv"), f.out));
        written.add(gpuAllReduce(f.results, f.out));
        written.add(zeroMemory(f.results.resolve("2026-11-26-zero-sharding.csv"), f.out));
        for (Path p : written) {
            System.out.println("wrote " + p);
        }
    }

    /** examples/s against workers: symmem4j, the best single model, the best ParallelWrapper mode, the ideal. */
    static Path dataParallel(Path csv, String label, String model, String title, Path out) throws IOException {
        List<Map<String, String>> rows = readCsv(csv).stream()
                .filter(r -> r.get("label").equals(label) && r.get("model").equals(model)).toList();
        if (rows.isEmpty()) {
            throw new IllegalArgumentException("no rows label=" + label + " model=" + model + " in " + csv
                    + " (expected ScalingBench's raw CSV with those labels)");
        }
        TreeMap<Integer, Double> ideal = new TreeMap<>();
        TreeMap<Integer, Double> symmem = new TreeMap<>();
        TreeMap<Integer, Double> single = new TreeMap<>();
        TreeMap<Integer, Double> wrapper = new TreeMap<>();
        OptionalDouble alone = median(rows, r -> r.get("mode").equals("alone"));
        for (int n : rows.stream().map(r -> Integer.parseInt(r.get("workers"))).distinct().sorted().toList()) {
            if (alone.isPresent()) {
                ideal.put(n, n * alone.getAsDouble());
            }
            // as ScalingReport: symmem4j is the better of plain and overlapped sync, ParallelWrapper the
            // better of its two modes, the single model its fastest ND4J thread count (at N = 1: alone)
            best(n, symmem, false, median(rows, mode(n, "symmem")), median(rows, mode(n, "symmem-overlap")));
            best(n, wrapper, false, median(rows, mode(n, "averaging")), median(rows, mode(n, "shared")));
            rows.stream().filter(mode(n, "single")).map(r -> r.get("threads")).distinct()
                    .forEach(t -> best(n, single, false, median(rows, mode(n, "single").and(r -> r.get("threads").equals(t)))));
            if (n == 1) {
                best(n, single, false, alone);
            }
        }
        XYChart chart = chart(title + ": DL4J data parallelism, 16-core H100 host", "workers (each 64 examples per step)",
                "examples/s (median)");
        workersAxis(chart);
        chart.getStyler().setYAxisMin(0.0);   // a rate: from zero, so that heights compare
        line(chart, "ideal: N x one worker alone", log2(ideal), Color.GRAY, DASHED);
        line(chart, "symmem4j", log2(symmem), PALETTE[0], SOLID);
        line(chart, "best single model (merged batch, fastest ND4J threads)", log2(single), PALETTE[2], SOLID);
        line(chart, "best ParallelWrapper mode", log2(wrapper), PALETTE[1], SOLID);
        Path raw = save(chart, out.resolve("data-parallel-" + model + ".png"));
        TreeMap<Integer, Double> baseline = new TreeMap<>();
        for (int n : symmem.keySet()) {
            best(n, baseline, false, optional(single.get(n)), optional(wrapper.get(n)));
        }
        XYChart speedup = speedupChart(title + ": symmem4j / best baseline, 16-core H100 host",
                "workers (each 64 examples per step)", "symmem4j examples/s / the better of the single model and ParallelWrapper");
        workersAxis(speedup);
        line(speedup, "symmem4j / best baseline", log2(ratio(symmem, baseline)), PALETTE[0], SOLID);
        System.out.println("wrote " + save(breakEven(speedup), out.resolve("data-parallel-" + model + "-speedup.png")));
        return raw;
    }

    /** Measured bubble against the simulator's for the same step's measured stage times, one point per run. */
    static Path pipelineBubbles(Path csv, Path out) throws IOException {
        Map<String, List<double[]>> byRun = new LinkedHashMap<>();
        for (Map<String, String> r : readCsv(csv)) {
            byRun.computeIfAbsent(r.get("run"), k -> new ArrayList<>()).add(new double[] {
                100 * Double.parseDouble(r.get("simulated_bubble")), 100 * Double.parseDouble(r.get("measured_bubble"))});
        }
        XYChart chart = chart("Pipeline bubble: measured against simulated, 16-core H100 host",
                "simulated for the measured stage times (%)", "measured (%)");
        double max = byRun.values().stream().flatMap(List::stream).mapToDouble(p -> Math.max(p[0], p[1])).max().orElse(1);
        XYSeries diagonal = chart.addSeries("measured = simulated", new double[] {0, max * 1.05}, new double[] {0, max * 1.05});
        diagonal.setMarker(SeriesMarkers.NONE);
        diagonal.setLineColor(Color.GRAY);
        diagonal.setLineStyle(DASHED);
        int i = 0;
        for (Map.Entry<String, List<double[]>> e : byRun.entrySet()) {
            XYSeries s = chart.addSeries(e.getKey(), e.getValue().stream().mapToDouble(p -> p[0]).toArray(),
                    e.getValue().stream().mapToDouble(p -> p[1]).toArray());
            s.setXYSeriesRenderStyle(XYSeries.XYSeriesRenderStyle.Scatter);
            s.setMarkerColor(PALETTE[i++ % PALETTE.length]);
        }
        return save(chart, out.resolve("pipeline-bubble-measured-vs-simulated.png"));
    }

    /** Latency against message size per rank count: symmem4j solid, Open MPI dashed, same colour. */
    static Path hostAllReduce(Path csv, Path out) throws IOException {
        Map<String, TreeMap<Integer, Double>> symmem = new TreeMap<>(Plots::numeric);
        Map<String, TreeMap<Integer, Double>> mpi = new TreeMap<>(Plots::numeric);
        int left = 0;
        for (Map<String, String> r : readCsv(csv)) {
            int kib = (int) (Long.parseLong(r.get("bytes")) / 1024);
            mpi.computeIfAbsent(r.get("ranks"), k -> new TreeMap<>()).put(kib, Double.parseDouble(r.get("openmpi_us")));
            // a cell the report marks as not representative (JIT warm-up, parked ranks) is left out of the line
            if (r.get("note").isEmpty()) {
                symmem.computeIfAbsent(r.get("ranks"), k -> new TreeMap<>()).put(kib, Double.parseDouble(r.get("symmem4j_us")));
            } else {
                left++;
            }
        }
        XYChart chart = chart("Host all-reduce (float32 SUM, threads) vs Open MPI 4.1.6, 16-core H100 host"
                        + (left > 0 ? " (" + left + " marked cells left out)" : ""), "message size (KiB)",
                "median latency (µs)");
        logLog(chart);
        XYChart speedup = speedupChart("Host all-reduce: Open MPI latency / symmem4j latency, 16-core H100 host",
                "message size (KiB)", "speed-up over Open MPI (×)");
        speedup.getStyler().setXAxisLogarithmic(true);
        speedup.getStyler().setXAxisLogarithmicDecadeOnly(true);
        speedup.getStyler().setXAxisDecimalPattern("#,##0");
        int i = 0;
        for (String ranks : mpi.keySet()) {
            Color c = PALETTE[i++ % PALETTE.length];
            if (symmem.containsKey(ranks)) {
                line(chart, ranks + " ranks: symmem4j", symmem.get(ranks), c, SOLID);
                line(speedup, ranks + " ranks", ratio(mpi.get(ranks), symmem.get(ranks)), c, SOLID);
            }
            line(chart, ranks + " ranks: Open MPI", mpi.get(ranks), c, DASHED);
        }
        System.out.println("wrote " + save(breakEven(speedup), out.resolve("host-allreduce-speedup.png")));
        return save(chart, out.resolve("host-allreduce-vs-openmpi.png"));
    }

    /** bf16 graph-captured latency per GPU count: symmem4j's faster algorithm solid, NCCL's better mode dashed. */
    static Path gpuAllReduce(Path results, Path out) throws IOException {
        XYChart chart = chart("GPU all-reduce (bf16, graph-captured) vs NCCL 2.28.3, H200s over NVLink",
                "message size (KiB)", "median latency (µs)");
        logLog(chart);
        XYChart speedup = speedupChart("GPU all-reduce: NCCL latency / symmem4j latency (bf16, graph-captured), H200s",
                "message size (KiB)", "speed-up over NCCL (×)");
        speedup.getStyler().setXAxisLogarithmic(true);
        speedup.getStyler().setXAxisLogarithmicDecadeOnly(true);
        speedup.getStyler().setXAxisDecimalPattern("#,##0");
        int i = 0;
        for (int gpus : new int[] {2, 4, 8}) {
            Path csv = results.resolve("2026-11-22-gpu-allreduce-" + gpus + "xh200.csv");
            TreeMap<Integer, Double> symmem = new TreeMap<>();
            TreeMap<Integer, Double> nccl = new TreeMap<>();
            for (Map<String, String> r : readCsv(csv)) {
                if (!r.get("dtype").equals("bfloat16") || !r.get("mode").equals("graph-captured")) {
                    continue;
                }
                int kib = (int) (Long.parseLong(r.get("bytes")) / 1024);
                best(kib, symmem, true, value(r, "one_shot_us"), value(r, "two_shot_us"));
                best(kib, nccl, true, value(r, "nccl_plain_us"), value(r, "nccl_window_us"));
            }
            if (symmem.isEmpty()) {
                throw new IllegalArgumentException("no bfloat16 graph-captured rows in " + csv);
            }
            Color c = PALETTE[i++ % PALETTE.length];
            line(chart, gpus + " GPUs: symmem4j", symmem, c, SOLID);
            line(chart, gpus + " GPUs: NCCL", nccl, c, DASHED);
            line(speedup, gpus + " GPUs", ratio(nccl, symmem), c, SOLID);
        }
        System.out.println("wrote " + save(breakEven(speedup), out.resolve("gpu-allreduce-speedup.png")));
        return save(chart, out.resolve("gpu-allreduce-vs-nccl.png"));
    }

    /**
     * Optimizer-state and gradient bytes per worker against the worker count, for plain data
     * parallelism and ZeRO stages 1 and 2, from ZeroShardingBench's raw CSV (the median over its
     * repetitions; the byte counts come from the workers' arrays, so repetitions agree), with the
     * unsharded state ÷ N that sharding aims at.
     */
    static Path zeroMemory(Path csv, Path out) throws IOException {
        List<Map<String, String>> rows = readCsv(csv);
        if (rows.isEmpty() || !rows.getFirst().containsKey("state_bytes_per_worker")) {
            throw new IllegalArgumentException("no ZeroShardingBench rows in " + csv + " (expected the CSV of"
                    + " bench/zero-sharding.sh, with columns workers, mode, state_bytes_per_worker, gradient_bytes_per_worker)");
        }
        Map<String, String> modes = new LinkedHashMap<>();
        modes.put("plain", "no sharding");
        modes.put("zero1", "ZeRO-1 (optimizer state)");
        modes.put("zero2", "ZeRO-2 (optimizer state and gradients sharded)");
        XYChart chart = chart(String.format(Locale.ROOT, "ZeRO memory per worker: DL4J MLP, %,d parameters, Adam, fp32",
                Long.parseLong(rows.getFirst().get("params"))), "workers N", "bytes per worker (MB = 10^6 bytes)");
        chart.getStyler().setXAxisDecimalPattern("0");
        chart.getStyler().setXAxisTickMarkSpacingHint(150); // a tick per worker count, not per half
        chart.getStyler().setLegendPosition(Styler.LegendPosition.OutsideS); // inside, it hides the unsharded line
        TreeMap<Integer, Double> ideal = new TreeMap<>();
        for (int n : rows.stream().map(r -> Integer.parseInt(r.get("workers"))).distinct().sorted().toList()) {
            medianOf(rows, r -> Integer.parseInt(r.get("workers")) == n, "unsharded_state_bytes")
                    .ifPresent(v -> ideal.put(n, v / n / 1e6));
        }
        // series that measured the same bytes are drawn once, labelled with every mode they stand for,
        // rather than drawn on one another (ZeRO-1 and -2 keep the same state; DL4J allocates each replica's
        // whole gradient view in every mode, README, Known limits)
        Map<TreeMap<Integer, Double>, List<String>> states = new LinkedHashMap<>();
        Map<TreeMap<Integer, Double>, List<String>> gradients = new LinkedHashMap<>();
        for (Map.Entry<String, String> mode : modes.entrySet()) {
            TreeMap<Integer, Double> state = new TreeMap<>();
            TreeMap<Integer, Double> gradient = new TreeMap<>();
            for (int n : ideal.keySet()) {
                Predicate<Map<String, String>> which = r -> r.get("mode").equals(mode.getKey())
                        && Integer.parseInt(r.get("workers")) == n;
                medianOf(rows, which, "state_bytes_per_worker").ifPresent(v -> state.put(n, v / 1e6));
                medianOf(rows, which, "gradient_bytes_per_worker").ifPresent(v -> gradient.put(n, v / 1e6));
            }
            states.computeIfAbsent(state, k -> new ArrayList<>()).add(mode.getValue());
            gradients.computeIfAbsent(gradient, k -> new ArrayList<>()).add(mode.getValue());
        }
        int i = 0;
        for (Map.Entry<TreeMap<Integer, Double>, List<String>> e : states.entrySet()) {
            line(chart, "optimizer state: " + String.join(" = ", e.getValue()), e.getKey(), PALETTE[i++ % PALETTE.length],
                    SOLID);
        }
        for (Map.Entry<TreeMap<Integer, Double>, List<String>> e : gradients.entrySet()) {
            line(chart, "gradient: " + (e.getValue().size() == modes.size() ? "every mode (DL4J allocates the whole view)"
                    : String.join(" = ", e.getValue())), e.getKey(), PALETTE[i++ % PALETTE.length], DASHED);
        }
        // last, so that its dashes show over the sharded modes' line it should coincide with
        line(chart, "unsharded optimizer state / N (the aim)", ideal, Color.GRAY, DASHED);
        return save(chart, out.resolve("zero-memory-per-worker.png"));
    }

    /** The median of {@code column} over the rows {@code which} selects, or empty when none does. */
    private static OptionalDouble medianOf(List<Map<String, String>> rows, Predicate<Map<String, String>> which,
                                           String column) {
        double[] v = rows.stream().filter(which).mapToDouble(r -> Double.parseDouble(r.get(column))).sorted().toArray();
        if (v.length == 0) {
            return OptionalDouble.empty();
        }
        return OptionalDouble.of(v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2);
    }

    /**
     * A worker-count axis: the points sit at log2(workers) on a linear axis, labelled 1, 2, 4, 8, 16 (a log
     * axis labels only its decades, 1 and 10, which hides the counts measured).
     */
    private static void workersAxis(XYChart chart) {
        chart.getStyler().setxAxisTickLabelsFormattingFunction(v -> {
            long k = Math.round(v);
            return Math.abs(v - k) < 1e-6 && k >= 0 && k < 31 ? Long.toString(1L << k) : "";
        });
    }

    /** The same points at x = log2(x), for {@link #workersAxis}; x must be a power of two. */
    private static TreeMap<Integer, Double> log2(TreeMap<Integer, Double> points) {
        TreeMap<Integer, Double> out = new TreeMap<>();
        points.forEach((x, v) -> {
            if (Integer.bitCount(x) != 1) {
                throw new IllegalArgumentException("worker count " + x + " is not a power of two: the workers axis"
                        + " places counts at log2(count) (expected 1, 2, 4, 8, ...)");
            }
            out.put(Integer.numberOfTrailingZeros(x), v);
        });
        return out;
    }

    /** Both axes logarithmic, labelled at every decade (1, 10, 100, 1,000, ...; 0.1, 0.01 below one). */
    private static void logLog(XYChart chart) {
        chart.getStyler().setXAxisLogarithmic(true);
        chart.getStyler().setYAxisLogarithmic(true);
        chart.getStyler().setXAxisLogarithmicDecadeOnly(true);
        chart.getStyler().setYAxisLogarithmicDecadeOnly(true);
        // (a tick-label formatting function would turn XChart's log axes linear: patterns instead)
        chart.getStyler().setXAxisDecimalPattern("#,##0");
        chart.getStyler().setYAxisDecimalPattern("#,##0.##");
    }

    /** A speed-up chart: linear y from zero ({@link #breakEven} draws the 1× line once the series are in). */
    private static XYChart speedupChart(String title, String x, String y) {
        XYChart chart = chart(title, x, y);
        chart.getStyler().setYAxisMin(0.0);
        chart.getStyler().setYAxisDecimalPattern("0.0");
        return chart;
    }

    /** {@code num / den} at every x where both have a point. */
    private static TreeMap<Integer, Double> ratio(TreeMap<Integer, Double> num, TreeMap<Integer, Double> den) {
        TreeMap<Integer, Double> r = new TreeMap<>();
        num.forEach((x, v) -> {
            Double d = den.get(x);
            if (d != null && d > 0) {
                r.put(x, v / d);
            }
        });
        return r;
    }

    /** The 1× line under a speed-up chart's series, across their x range. */
    private static XYChart breakEven(XYChart chart) {
        double lo = Double.POSITIVE_INFINITY;
        double hi = Double.NEGATIVE_INFINITY;
        for (XYSeries s : chart.getSeriesMap().values()) {
            for (double x : s.getXData()) {
                lo = Math.min(lo, x);
                hi = Math.max(hi, x);
            }
        }
        if (lo <= hi) {
            XYSeries even = chart.addSeries("1× (as fast as the baseline)", new double[] {lo, hi}, new double[] {1, 1});
            even.setMarker(SeriesMarkers.NONE);
            even.setLineColor(Color.GRAY);
            even.setLineStyle(DASHED);
        }
        return chart;
    }

    private static OptionalDouble optional(Double v) {
        return v == null ? OptionalDouble.empty() : OptionalDouble.of(v);
    }

    private static XYChart chart(String title, String x, String y) {
        XYChart chart = new XYChartBuilder().width(960).height(600).title(title).xAxisTitle(x).yAxisTitle(y).build();
        chart.getStyler().setLegendPosition(Styler.LegendPosition.InsideNW);
        chart.getStyler().setChartBackgroundColor(Color.WHITE);
        chart.getStyler().setMarkerSize(7);
        return chart;
    }

    private static void line(XYChart chart, String name, TreeMap<Integer, Double> points, Color color, BasicStroke stroke) {
        if (points.isEmpty()) {
            return;
        }
        XYSeries s = chart.addSeries(name, points.keySet().stream().mapToDouble(Integer::doubleValue).toArray(),
                points.values().stream().mapToDouble(Double::doubleValue).toArray());
        s.setLineColor(color);
        s.setMarkerColor(color);
        s.setLineStyle(stroke);
        s.setMarker(SeriesMarkers.CIRCLE);
    }

    private static Path save(XYChart chart, Path png) throws IOException {
        try (OutputStream os = Files.newOutputStream(png)) {
            BitmapEncoder.saveBitmap(chart, os, BitmapEncoder.BitmapFormat.PNG);
        }
        return png;
    }

    private static Predicate<Map<String, String>> mode(int workers, String mode) {
        return r -> r.get("mode").equals(mode) && Integer.parseInt(r.get("workers")) == workers;
    }

    /** The median examples/s of the rows {@code which} selects, or empty when none does. */
    private static OptionalDouble median(List<Map<String, String>> rows, Predicate<Map<String, String>> which) {
        double[] v = rows.stream().filter(which).mapToDouble(r -> Double.parseDouble(r.get("examples_per_s"))).sorted()
                .toArray();
        if (v.length == 0) {
            return OptionalDouble.empty();
        }
        // ScalingReport's median: the middle value, the mean of the two middle ones for an even count
        return OptionalDouble.of(v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2);
    }

    /** Merges the present {@code candidates} into {@code into} at {@code x}: the largest, or the smallest with {@code lowest}. */
    private static void best(int x, TreeMap<Integer, Double> into, boolean lowest, OptionalDouble... candidates) {
        for (OptionalDouble v : candidates) {
            if (v.isPresent()) {
                into.merge(x, v.getAsDouble(), lowest ? Math::min : Math::max);
            }
        }
    }

    private static OptionalDouble value(Map<String, String> row, String column) {
        String v = row.get(column);
        return v == null || v.isEmpty() ? OptionalDouble.empty() : OptionalDouble.of(Double.parseDouble(v));
    }

    private static int numeric(String a, String b) {
        return Integer.compare(Integer.parseInt(a), Integer.parseInt(b));
    }

    /**
     * A CSV file as rows keyed by the header's names: lines starting with {@code #} are comments,
     * fields may be quoted ({@code ""} inside quotes is a quote).
     */
    static List<Map<String, String>> readCsv(Path csv) throws IOException {
        if (!Files.isRegularFile(csv)) {
            throw new IllegalArgumentException("missing input csv=" + csv + " (expected the raw CSVs committed under"
                    + " bench/results/; run from the repository root or pass --results DIR)");
        }
        List<String> lines = Files.readAllLines(csv).stream().filter(l -> !l.isBlank() && !l.startsWith("#")).toList();
        List<String> header = fields(lines.getFirst());
        List<Map<String, String>> rows = new ArrayList<>();
        for (int i = 1; i < lines.size(); i++) {
            List<String> f = fields(lines.get(i));
            if (f.size() != header.size()) {
                throw new IllegalArgumentException(String.format(Locale.ROOT, "%s line %d: %d fields, expected %d (%s)",
                        csv, i + 1, f.size(), header.size(), header));
            }
            Map<String, String> row = new LinkedHashMap<>();
            for (int c = 0; c < header.size(); c++) {
                row.put(header.get(c), f.get(c));
            }
            rows.add(row);
        }
        return rows;
    }

    private static List<String> fields(String line) {
        List<String> out = new ArrayList<>();
        StringBuilder cur = new StringBuilder();
        boolean quoted = false;
        for (int i = 0; i < line.length(); i++) {
            char ch = line.charAt(i);
            if (quoted) {
                if (ch == '"' && i + 1 < line.length() && line.charAt(i + 1) == '"') {
                    cur.append('"');
                    i++;
                } else if (ch == '"') {
                    quoted = false;
                } else {
                    cur.append(ch);
                }
            } else if (ch == '"') {
                quoted = true;
            } else if (ch == ',') {
                out.add(cur.toString());
                cur.setLength(0);
            } else {
                cur.append(ch);
            }
        }
        out.add(cur.toString());
        return out;
    }
}
