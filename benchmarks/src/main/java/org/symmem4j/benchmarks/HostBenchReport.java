package org.symmem4j.benchmarks;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.symmem4j.examples.Cli;
import picocli.CommandLine.Command;
import picocli.CommandLine.Parameters;

/**
 * Turns one run of the host benchmarks into the markdown table under bench/results/: JMH's CSV
 * (all-reduce in-JVM and across processes, memcpy, reducer bandwidth) next to the Open MPI
 * baseline measured in the same run.
 *
 * <pre>
 *   HostBenchReport &lt;jmh.csv&gt; &lt;mpi.txt&gt; &lt;header.md&gt;
 * </pre>
 * The header file (date, machine, commit, command) is written by bench/host-allreduce.sh and
 * copied to the top of the report.
 */
public final class HostBenchReport {

    private static final String[] ALGORITHMS = {"ONE_SHOT", "TWO_SHOT", "RING"};

    private HostBenchReport() {
    }

    /** One JMH result in microseconds: the median, and an error (NaN for percentiles, which have none). */
    record Score(double micros, double error) {
    }

    @Command(name = "HostBenchReport", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "Writes the host all-reduce report (bench/host-allreduce.sh) as markdown to stdout: the JMH results and the Open MPI baseline"
                    + " measured in the same run, after the header file's text.")
    static final class Flags {
        @Parameters(index = "0", paramLabel = "JMH_CSV", description = "JMH's CSV results (-rf csv)")
        Path jmh;
        @Parameters(index = "1", paramLabel = "MPI_TXT", description = "the Open MPI baseline's output (mpi.txt)")
        Path mpi;
        @Parameters(index = "2", paramLabel = "HEADER_MD", description = "markdown put first (date, machine, commit)")
        Path header;
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args);
        args = new String[] {flags.jmh.toString(), flags.mpi.toString(), flags.header.toString()};
        Map<String, Score> jmh = readJmh(Path.of(args[0]));
        MpiResults mpiResults = readMpi(Path.of(args[1]));
        Map<Long, Double> mpi = mpiResults.medianMicros();
        StringBuilder md = new StringBuilder(Files.readString(Path.of(args[2])));
        md.append("\nOpen MPI baseline: ").append(mpiResults.versionLine()).append("\n\n");
        md.append("## All-reduce latency, 2 ranks, float32 SUM, in place (median µs per operation, lower is better)\n\n");
        md.append("Medians: JMH sample mode (each sample = 16 back-to-back operations, divided by 16), and Open MPI's"
                + " per-operation times. This 2-vCPU VM has stretches several times slower than its usual speed; medians"
                + " are robust to them, means are not. \"best\" is the fastest of the three algorithms at that size;"
                + " \"× MPI\" is Open MPI's median divided by it (above 1 = faster than Open MPI).\n\n");
        md.append("| size | memcpy | Open MPI | threads ONE_SHOT | threads TWO_SHOT | threads RING | threads best × MPI"
                + " | processes ONE_SHOT | processes TWO_SHOT | processes RING | processes best × MPI |\n");
        md.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        List<String> slowerThanMpi = new ArrayList<>();
        List<String> under3x = new ArrayList<>();
        for (long bytes : Sizes.ALL) {
            Score memcpy = jmh.get("MemcpyBenchmark.memcpy|" + bytes);
            Double m = mpi.get(bytes);
            md.append("| ").append(size(bytes)).append(" | ").append(fmt(memcpy)).append(" | ")
                    .append(m == null ? "—" : String.format(Locale.ROOT, "%.2f", m));
            for (String transport : new String[] {"HostAllReduceBenchmark", "ProcessAllReduceBenchmark"}) {
                double best = Double.MAX_VALUE;
                for (String alg : ALGORITHMS) {
                    Score s = jmh.get(transport + ".allReduce|" + alg + "|" + bytes);
                    md.append(" | ").append(fmt(s));
                    if (s != null) {
                        best = Math.min(best, s.micros());
                    }
                }
                if (m != null && best != Double.MAX_VALUE) {
                    double speedup = m / best;
                    md.append(String.format(Locale.ROOT, " | %.2f×", speedup));
                    String who = (transport.startsWith("Host") ? "threads " : "processes ") + size(bytes);
                    if (speedup < 1) {
                        slowerThanMpi.add(who);
                    }
                    if (bytes >= (1 << 20) && speedup < 3) {
                        under3x.add(who + String.format(Locale.ROOT, " (%.2f×)", speedup));
                    }
                } else {
                    md.append(" | —");
                }
            }
            md.append(" |\n");
        }
        md.append("\n## Targets\n\n");
        md.append("- No slower than Open MPI at any size from 1 KiB: ")
                .append(slowerThanMpi.isEmpty() ? "**met**" : "**not met** at " + String.join(", ", slowerThanMpi)).append(".\n");
        md.append("- At least 3× faster than Open MPI from 1 MiB: ")
                .append(under3x.isEmpty() ? "**met**" : "**not met** at " + String.join(", ", under3x)).append(".\n");
        md.append("\n## Reduction loop against memory bandwidth (one thread)\n\n");
        md.append("`dst += src` over float32 (two streams read, one written) next to memcpy of the same bytes (one read, one"
                + " written); GB/s count every byte read and written.\n\n");
        md.append("| size | loop | reduce µs (median) | reduce GB/s | memcpy µs (median) | memcpy GB/s | reduce / memcpy bandwidth |\n");
        md.append("|---:|---|---:|---:|---:|---:|---:|\n");
        for (long bytes : new long[] {65536, 1048576, 67108864}) {
            Score c = jmh.get("ReducerBandwidthBenchmark.memcpy|" + bytes);
            for (String[] loop : new String[][] {{"reduceSumInPlace", "TWO_SHOT/RING"},
                {"reduceSumInPlaceCanonicalNaN", "ONE_SHOT (canonical NaN)"}}) {
                Score r = jmh.get("ReducerBandwidthBenchmark." + loop[0] + "|" + bytes);
                if (r == null || c == null) {
                    continue;
                }
                double rg = 3.0 * bytes / r.micros() / 1e3;
                double cg = 2.0 * bytes / c.micros() / 1e3;
                md.append(String.format(Locale.ROOT, "| %s | %s | %s | %.1f | %s | %.1f | %.0f%% |%n", size(bytes), loop[1],
                        fmt(r), rg, fmt(c), cg, 100 * rg / cg));
            }
        }
        System.out.print(md);
    }

    /**
     * One run of a bench/mpi program: its medians in microseconds by message size, and the library's
     * version line (or a note that it is missing).
     */
    record MpiResults(Map<Long, Double> medianMicros, String versionLine) {
    }

    /**
     * Reads a bench/mpi program's output: {@code bytes=N ... median_us=X ...} lines, and the first line
     * naming Open MPI.
     */
    static MpiResults readMpi(Path output) throws IOException {
        Map<Long, Double> medians = new HashMap<>();
        String version = "";
        for (String line : Files.readAllLines(output)) {
            if (line.startsWith("bytes=")) {
                Map<String, String> kv = keyValues(line);
                medians.put(Long.parseLong(kv.get("bytes")), Double.parseDouble(kv.get("median_us")));
            } else if (version.isEmpty() && line.toLowerCase(Locale.ROOT).contains("open mpi")) {
                version = line.trim();
            }
        }
        return new MpiResults(medians, version.isEmpty() ? "(version line missing)" : version);
    }

    /**
     * Medians, keyed "Class.method|param..." with params in the CSV's column order, which is JMH's
     * alphabetical order of the parameter names (algorithm before bytes, bytes before ranks).
     */
    static Map<String, Score> readJmh(Path csv) throws IOException {
        List<String> lines = Files.readAllLines(csv);
        List<String> header = splitCsv(lines.getFirst());
        int score = header.indexOf("Score");
        int error = header.indexOf("Score Error (99.9%)");
        List<Integer> params = new ArrayList<>();
        for (int i = 0; i < header.size(); i++) {
            if (header.get(i).startsWith("Param: ")) {
                params.add(i);
            }
        }
        Map<String, Score> out = new HashMap<>();
        for (String line : lines.subList(1, lines.size())) {
            List<String> cells = splitCsv(line);
            String name = cells.get(0).replace("\u00b7", "");
            if (!name.endsWith(":p0.50")) {
                continue; // the median row of each sample-mode benchmark; means and other percentiles are skipped
            }
            name = name.substring(0, name.length() - ":p0.50".length());
            StringBuilder key = new StringBuilder(name.substring(name.lastIndexOf('.', name.lastIndexOf('.') - 1) + 1));
            for (int p : params) {
                if (p < cells.size() && !cells.get(p).isEmpty()) {
                    key.append('|').append(cells.get(p));
                }
            }
            double err = error >= 0 && !cells.get(error).isEmpty() && !cells.get(error).equals("NaN")
                    ? Double.parseDouble(cells.get(error)) : Double.NaN;
            out.put(key.toString(), new Score(Double.parseDouble(cells.get(score)), err));
        }
        return out;
    }

    private static List<String> splitCsv(String line) {
        List<String> cells = new ArrayList<>();
        for (String raw : line.split(",", -1)) {
            cells.add(raw.startsWith("\"") && raw.endsWith("\"") && raw.length() >= 2 ? raw.substring(1, raw.length() - 1) : raw);
        }
        return cells;
    }

    private static Map<String, String> keyValues(String line) {
        Map<String, String> kv = new HashMap<>();
        for (String part : line.trim().split("\\s+")) {
            int eq = part.indexOf('=');
            if (eq > 0) {
                kv.put(part.substring(0, eq), part.substring(eq + 1));
            }
        }
        return kv;
    }

    static String fmt(Score s) {
        if (s == null) {
            return "—";
        }
        return Double.isNaN(s.error()) ? String.format(Locale.ROOT, "%.2f", s.micros())
                : String.format(Locale.ROOT, "%.2f ± %.2f", s.micros(), s.error());
    }

    static String size(long bytes) {
        if (bytes >= (1 << 20)) {
            return (bytes >> 20) + " MiB";
        }
        return bytes >= 1024 ? (bytes >> 10) + " KiB" : bytes + " B";
    }
}
