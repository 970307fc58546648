package org.symmem4j.benchmarks;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Cell;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Phase;
import org.symmem4j.benchmarks.GpuProcessAllReduceBench.Settings;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;

/**
 * The comparison and report of one {@link GpuProcessAllReduceBench} run: rank 0's cells of the processes and of
 * the threads side by side, the ratio of each against the 5 % target, the markdown report and the {@code --raw}
 * CSV. Apart from writing the CSV it neither runs nor reads anything (no GPU, no child JVM, no clock), so the
 * tests check it on made-up cells.
 */
final class ProcessAllReduceReport {

    /** The target: processes' time over threads' time at most this at every size. */
    static final double TARGET_RATIO = 1.05;
    /** The columns of {@code --raw}. */
    static final List<String> CSV_COLUMNS = List.of("gpus", "device", "dtype", "algorithm", "mode", "bytes",
            "processes_us", "threads_us", "processes_over_threads", "processes_spread", "threads_spread",
            "processes_slowest_rank_us", "threads_slowest_rank_us", "reps", "rounds");

    private ProcessAllReduceReport() {
    }

    /**
     * One row of the report: rank 0's cells of both phases at one dtype, algorithm, mode and size (null where a
     * phase has none), and the slowest rank's median of each.
     */
    record Comparison(DType dtype, Algorithm algorithm, boolean graph, long bytes, Cell processes, Cell threads,
                      double processesSlowest, double threadsSlowest) {

        double processesMicros() {
            return processes == null ? Double.NaN : processes.micros();
        }

        double threadsMicros() {
            return threads == null ? Double.NaN : threads.micros();
        }

        /** processes / threads, rank 0's medians; NaN unless both ran. */
        double ratio() {
            return processesMicros() / threadsMicros();
        }
    }

    /**
     * The ratios of a set of comparisons: the largest (and where), the median, and how many exceed the target.
     *
     * @param cells  comparisons with a ratio (both phases ran)
     * @param worst  the comparison of the largest ratio, null with no cells
     * @param median the median ratio (of an even count, the mean of the middle two), NaN with no cells
     * @param above  how many ratios exceed {@link #TARGET_RATIO}
     */
    record Summary(int cells, Comparison worst, double median, int above) {

        static Summary of(List<Comparison> comparisons) {
            List<Comparison> with = comparisons.stream().filter(c -> !Double.isNaN(c.ratio())).toList();
            if (with.isEmpty()) {
                return new Summary(0, null, Double.NaN, 0);
            }
            Comparison worst = with.getFirst();
            for (Comparison c : with) {
                if (c.ratio() > worst.ratio()) {
                    worst = c;
                }
            }
            double[] r = with.stream().mapToDouble(Comparison::ratio).sorted().toArray();
            double median = r.length % 2 == 1 ? r[r.length / 2] : (r[r.length / 2 - 1] + r[r.length / 2]) / 2;
            int above = (int) with.stream().filter(c -> c.ratio() > TARGET_RATIO).count();
            return new Summary(with.size(), worst, median, above);
        }

        /** The largest ratio; NaN with no cells. */
        double largest() {
            return worst == null ? Double.NaN : worst.ratio();
        }

        /** Where the largest ratio is, e.g. {@code bf16 graph-captured 4 KiB}; a dash with no cells. */
        String largestAt() {
            return worst == null ? "—" : dtypeName(worst.dtype()) + " " + modeName(worst.graph()) + " "
                    + GpuAllReduceBench.size(worst.bytes());
        }

        String verdict() {
            if (cells == 0) {
                return "not measured";
            }
            return above == 0 ? "within 5 %" : "not within 5 %: " + above + " of " + cells + " cells above "
                    + TARGET_RATIO;
        }
    }

    /** Every dtype, algorithm, mode and size of the settings, in report order: algorithm, dtype, mode, size. */
    static List<Comparison> compare(Settings s, Phase processes, Phase threads) {
        List<Comparison> rows = new ArrayList<>();
        for (Algorithm algorithm : GpuProcessAllReduceBench.ALGORITHMS) {
            for (DType dtype : s.dtypes()) {
                for (boolean graph : reportModes(s)) {
                    for (long bytes : s.sizes()) {
                        String key = Cell.key(dtype, algorithm, graph, bytes);
                        rows.add(new Comparison(dtype, algorithm, graph, bytes, processes.rank0(key), threads.rank0(key),
                                processes.slowestRank(key), threads.slowestRank(key)));
                    }
                }
            }
        }
        return rows;
    }

    /** Graph-captured first in the report: the target's mode. */
    private static List<Boolean> reportModes(Settings s) {
        return s.modes().reversed();
    }

    /**
     * What the report says about the run, besides the cells.
     *
     * @param date     when the report was made
     * @param gpus     ranks (one per GPU)
     * @param devices  GPUs CUDA shows
     * @param commit   the commit measured, or where to find it
     * @param versions CUDA driver and NCCL
     * @param jvmFlags every JVM's flags
     * @param order    the phases' order, per round
     */
    record ReportHeader(String date, int gpus, int devices, String commit, String versions, List<String> jvmFlags,
                        List<String> order) {
    }

    /**
     * The markdown report: the header, the summary (a line per algorithm, then per algorithm, dtype and mode) with
     * the notes, and a table per algorithm, dtype and mode. Pure, so it is tested on made-up cells.
     */
    static String report(ReportHeader h, Settings s, Phase processes, Phase threads, List<Comparison> rows) {
        StringBuilder md = new StringBuilder();
        md.append("# GPU all-reduce: one process per GPU against one JVM with a thread per GPU\n\n");
        md.append("- date: ").append(h.date()).append('\n');
        md.append("- GPUs: ").append(h.gpus()).append(" × ").append(processes.device()).append(" (CUDA shows ")
                .append(h.devices()).append(")\n");
        if (h.gpus() > h.devices()) {
            md.append("- ranks share GPUs: ").append(h.gpus()).append(" ranks on ").append(h.devices())
                    .append(h.devices() == 1 ? " GPU" : " GPUs").append(" (--share-gpus): correctness and the latency range of")
                    .append(" processes against threads only, not speed; NCCL refuses shared GPUs\n");
        }
        md.append("- commit: ").append(h.commit()).append('\n');
        md.append("- ").append(h.versions()).append('\n');
        md.append("- symmem4j kernel launches: processes ").append(processes.launch()).append("; threads ")
                .append(threads.launch()).append('\n');
        md.append("- repetitions: ").append(s.reps()).append(" per cell and round, ").append(s.rounds())
                .append(s.rounds() == 1 ? " round" : " rounds").append(" (").append(s.reps() * s.rounds())
                .append(" pooled; the median is reported); order per round: ").append(String.join("; ", h.order()))
                .append('\n');
        md.append(String.format(Locale.ROOT, "- processes: %d JVMs started by this benchmark with torchrun's variables,"
                + " each a ProcessGroup on the CUDA transport (memory exported between processes); %.1f s wall in all"
                + " (JVM start, CUDA and NCCL set-up included)%n", h.gpus(), processes.wallSeconds()));
        md.append(String.format(Locale.ROOT, "- threads: one JVM of %d rank threads (InJvmWorld, as GpuAllReduceBench),"
                + " started by this benchmark like the processes, never at the same time; %.1f s wall in all (likewise)%n",
                h.gpus(), threads.wallSeconds()));
        md.append("- JVM flags of every child JVM: `").append(String.join(" ", h.jvmFlags())).append("`\n");
        md.append("- method: in-place SUM on random data, GpuAllReduceBench's timing: CUDA-event timings of a batch")
                .append(" (100 ops up to 1 MiB, 20 up to 16 MiB, 5 above) on rank 0's stream, each after a barrier;")
                .append(" graph-captured = the batch captured once (DeviceCommunicator.capture) and replayed, eager = one")
                .append(" call per op. processes / threads: rank 0's medians (below 1: the processes are faster); spread")
                .append(" = IQR / median of the pooled repetitions.\n\n");

        md.append("## Summary\n\n");
        md.append("Target: one process per GPU within 5 % of one JVM (processes / threads ≤ ").append(TARGET_RATIO)
                .append(" at every size).\n\n");
        List<String> notes = new ArrayList<>();
        for (Algorithm algorithm : GpuProcessAllReduceBench.ALGORITHMS) {
            List<Comparison> mine = rows.stream().filter(c -> c.algorithm() == algorithm).toList();
            Summary sum = Summary.of(mine);
            String skipped = skipped(algorithm, processes, threads);
            if (skipped != null) {
                notes.add(skipped);
            }
            if (sum.cells() == 0) {
                md.append("- ").append(algorithm).append(": no size ran in both phases")
                        .append(skipped != null ? ": " + skipped : "").append('\n');
                continue;
            }
            md.append(String.format(Locale.ROOT, "- %s: largest processes / threads %.3f (%s), median %.3f over %d"
                    + " cells: %s%n", algorithm, sum.largest(), sum.largestAt(), sum.median(), sum.cells(), sum.verdict()));
        }
        md.append("\n| algorithm | dtype | mode | cells | largest processes / threads | at | median | verdict |\n");
        md.append("|---|---|---|---:|---:|---|---:|---|\n");
        for (Algorithm algorithm : GpuProcessAllReduceBench.ALGORITHMS) {
            for (DType dtype : s.dtypes()) {
                for (boolean graph : reportModes(s)) {
                    Summary sum = Summary.of(rows.stream().filter(c -> c.algorithm() == algorithm && c.dtype() == dtype
                            && c.graph() == graph).toList());
                    md.append(String.format(Locale.ROOT, "| %s | %s | %s | %d | %s | %s | %s | %s |%n", algorithm,
                            dtypeName(dtype), modeName(graph), sum.cells(), ratio(sum.largest()),
                            sum.worst() == null ? "—" : GpuAllReduceBench.size(sum.worst().bytes()), ratio(sum.median()),
                            sum.verdict()));
                }
            }
        }
        for (Comparison c : rows) {
            boolean explained = skipped(c.algorithm(), processes, threads) != null;
            if (!explained && c.processes() != null && c.threads() != null && c.processes().ran() != c.threads().ran()) {
                notes.add(c.algorithm() + " " + dtypeName(c.dtype()) + " " + modeName(c.graph()) + " "
                        + GpuAllReduceBench.size(c.bytes()) + " ran only in the " + (c.processes().ran() ? "processes"
                        : "threads"));
            }
        }
        if (!notes.isEmpty()) {
            md.append("\nNotes:\n\n- ").append(String.join("\n- ", notes)).append('\n');
        }
        md.append('\n');

        for (Algorithm algorithm : GpuProcessAllReduceBench.ALGORITHMS) {
            md.append("## ").append(algorithm).append("\n\n");
            for (DType dtype : s.dtypes()) {
                for (boolean graph : reportModes(s)) {
                    md.append("### ").append(dtypeName(dtype)).append(", ").append(modeName(graph)).append("\n\n");
                    md.append("| size | processes µs | threads µs | processes / threads | spread processes |"
                            + " spread threads |\n");
                    md.append("|---:|---:|---:|---:|---:|---:|\n");
                    for (Comparison c : rows) {
                        if (c.algorithm() != algorithm || c.dtype() != dtype || c.graph() != graph) {
                            continue;
                        }
                        double r = c.ratio();
                        md.append(String.format(Locale.ROOT, "| %s | %s | %s | %s | %s | %s |%n",
                                GpuAllReduceBench.size(c.bytes()), f2(c.processesMicros()), f2(c.threadsMicros()),
                                r > TARGET_RATIO ? "**" + ratio(r) + "**" : ratio(r),
                                f3(c.processes() == null ? Double.NaN : c.processes().spread()),
                                f3(c.threads() == null ? Double.NaN : c.threads().spread())));
                    }
                    md.append('\n');
                }
            }
        }
        return md.toString();
    }

    /** Why an algorithm did not run in a phase, or null where it ran in both. */
    private static String skipped(Algorithm algorithm, Phase processes, Phase threads) {
        if (algorithm != Algorithm.NCCL || (processes.nccl() && threads.nccl())) {
            return null;
        }
        String where = !processes.nccl() && !threads.nccl() ? "processes or threads"
                : !processes.nccl() ? "processes" : "threads";
        return "NCCL skipped: the communicator does not support it in the " + where + " (NCCL did not load, see the"
                + " runtime line above, or ranks share a GPU)";
    }

    /** One CSV row per dtype, algorithm, mode and size. */
    static void writeRaw(Path file, Settings s, int gpus, String device, List<Comparison> rows) throws IOException {
        try (RawCsv csv = RawCsv.open(file, CSV_COLUMNS)) {
            for (Comparison c : rows) {
                csv.row(gpus, device, c.dtype().name().toLowerCase(Locale.ROOT), c.algorithm(), modeName(c.graph()),
                        c.bytes(), RawCsv.num("%.3f", c.processesMicros()), RawCsv.num("%.3f", c.threadsMicros()),
                        RawCsv.num("%.4f", c.ratio()),
                        RawCsv.num("%.4f", c.processes() == null ? Double.NaN : c.processes().spread()),
                        RawCsv.num("%.4f", c.threads() == null ? Double.NaN : c.threads().spread()),
                        RawCsv.num("%.3f", c.processesSlowest()), RawCsv.num("%.3f", c.threadsSlowest()), s.reps(),
                        s.rounds());
            }
        }
    }

    static String dtypeName(DType d) {
        return d == DType.BFLOAT16 ? "bf16" : d == DType.FLOAT32 ? "fp32" : d.name().toLowerCase(Locale.ROOT);
    }

    static String modeName(boolean graph) {
        return graph ? "graph-captured" : "eager";
    }

    private static String f2(double v) {
        return Double.isNaN(v) ? "—" : String.format(Locale.ROOT, "%.2f", v);
    }

    private static String f3(double v) {
        return Double.isNaN(v) ? "—" : String.format(Locale.ROOT, "%.3f", v);
    }

    private static String ratio(double v) {
        return Double.isNaN(v) ? "—" : String.format(Locale.ROOT, "%.3f", v);
    }
}
