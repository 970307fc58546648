package org.symmem4j.benchmarks;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;
import org.symmem4j.benchmarks.HostBenchReport.MpiResults;
import org.symmem4j.benchmarks.HostBenchReport.Score;
import org.symmem4j.examples.Cli;
import picocli.CommandLine.Command;
import picocli.CommandLine.Parameters;

/**
 * Turns one run of bench/pipeline-handoff.sh into the markdown report under bench/results/: the
 * one-way stage-link hand-off latency with ranks as threads and as processes, with default and with
 * spin waits ({@link StageLinkHandoffBenchmark}), next to the baselines measured in the same run:
 * memcpy of the same bytes in one thread ({@link MemcpyBenchmark}), the hand-off's own copies in one
 * thread ({@link HandoffCopiesBenchmark}) and an Open MPI {@code MPI_Send}/{@code MPI_Recv} ping-pong
 * (bench/mpi/pingpong_bench.c).
 *
 * <pre>
 *   HandoffBenchReport &lt;jmh.csv&gt; &lt;mpi-pingpong.txt&gt; &lt;header.md&gt;
 * </pre>
 * The header file (date, machine, commit, command, method) is written by the script and copied to
 * the top of the report. The sizes are those the hand-off benchmark ran.
 */
public final class HandoffBenchReport {

    private static final String HANDOFF = "StageLinkHandoffBenchmark.handoff|";

    private HandoffBenchReport() {
    }

    @Command(name = "HandoffBenchReport", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class, showDefaultValues = true,
            description = "Writes the stage-link hand-off report (bench/pipeline-handoff.sh) as markdown to stdout: the JMH results and the Open MPI baseline"
                    + " measured in the same run, after the header file's text.")
    static final class Flags {
        @Parameters(index = "0", paramLabel = "JMH_CSV", description = "JMH's CSV results (-rf csv)")
        Path jmh;
        @Parameters(index = "1", paramLabel = "MPI_TXT", description = "the Open MPI baseline's output (mpi-pingpong.txt)")
        Path mpi;
        @Parameters(index = "2", paramLabel = "HEADER_MD", description = "markdown put first (date, machine, commit)")
        Path header;
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args);
        args = new String[] {flags.jmh.toString(), flags.mpi.toString(), flags.header.toString()};
        Map<String, Score> jmh = HostBenchReport.readJmh(Path.of(args[0]));
        MpiResults mpi = HostBenchReport.readMpi(Path.of(args[1]));
        TreeSet<Long> sizes = new TreeSet<>();
        for (String key : jmh.keySet()) {
            if (key.startsWith(HANDOFF)) {
                sizes.add(Long.parseLong(key.split("\\|")[1]));
            }
        }
        if (sizes.isEmpty()) {
            throw new IllegalArgumentException("no StageLinkHandoffBenchmark medians in " + args[0]
                    + " (expected sample-time rows such as StageLinkHandoffBenchmark.handoff:p0.50; did JMH run it?)");
        }

        StringBuilder md = new StringBuilder(Files.readString(Path.of(args[2])));
        md.append("\nOpen MPI baseline: ").append(mpi.versionLine()).append("\n\n");
        md.append("## Stage-link hand-off latency, 2 ranks, one way (median µs, lower is better)\n\n");
        md.append("A hand-off: `Sender.send` (payload and header put into the receiver's symmetric memory, release"
                + " signal), `Receiver.receive` (acquire-wait, header check), a copy of the payload out into the"
                + " receiving stage's private buffer, `release()`. One way = round trip / 2.\n\n");
        md.append("- \"memcpy\": `MemorySegment.copy` of the same bytes within one thread, between the same two"
                + " buffers every time (the floor for one copy; a hand-off copies twice: into the peer's slot, and"
                + " out of it).\n");
        md.append("- \"copies\": the round trip's four copies through its five distinct buffers, in one thread with"
                + " nothing to wait for, per one way (`HandoffCopiesBenchmark`): the floor for the hand-off's data"
                + " movement without a second core.\n");
        md.append("- \"Open MPI\": `MPI_Send`/`MPI_Recv` ping-pong into the receiver's buffer, one way = round trip"
                + " / 2.\n");
        md.append("- \"× MPI\" is Open MPI's median divided by ours (above 1 = faster than Open MPI); \"÷ copies\""
                + " is ours divided by \"copies\" (1 = the hand-off costs only its copies).\n");
        List<String> slowerThanMpi = new ArrayList<>();
        table(md, "Default waits (`GroupOptions.defaults()`, as `PipelineExecutor` runs today: spin, yield, then park"
                + " 1 µs doubling up to 1 ms)", StageLinkHandoffBenchmark.Waits.BACKOFF, sizes, jmh, mpi, slowerThanMpi);
        table(md, "Spin waits (a waiting rank never yields or parks; Open MPI's shared-memory transport also"
                + " busy-polls)", StageLinkHandoffBenchmark.Waits.SPIN, sizes, jmh, mpi, slowerThanMpi);
        md.append("\nSlower than Open MPI at: ")
                .append(slowerThanMpi.isEmpty() ? "no size." : String.join(", ", slowerThanMpi) + ".").append("\n");
        System.out.print(md);
    }

    private static void table(StringBuilder md, String title, StageLinkHandoffBenchmark.Waits waits, TreeSet<Long> sizes,
                              Map<String, Score> jmh, MpiResults mpi, List<String> slowerThanMpi) {
        md.append("\n### ").append(title).append("\n\n");
        md.append("| size | threads | processes | memcpy | copies | Open MPI | threads × MPI | processes × MPI"
                + " | threads ÷ copies | processes ÷ copies |\n");
        md.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (long bytes : sizes) {
            Score threads = jmh.get(HANDOFF + bytes + "|" + StageLinkHandoffBenchmark.Ranks.THREADS + "|" + waits);
            Score processes = jmh.get(HANDOFF + bytes + "|" + StageLinkHandoffBenchmark.Ranks.PROCESSES + "|" + waits);
            Score memcpy = jmh.get("MemcpyBenchmark.memcpy|" + bytes);
            Score copies = jmh.get("HandoffCopiesBenchmark.roundTripCopies|" + bytes);
            Double openMpi = mpi.medianMicros().get(bytes);
            Double copiesMicros = copies == null ? null : copies.micros();
            md.append("| ").append(HostBenchReport.size(bytes))
                    .append(" | ").append(HostBenchReport.fmt(threads))
                    .append(" | ").append(HostBenchReport.fmt(processes))
                    .append(" | ").append(HostBenchReport.fmt(memcpy))
                    .append(" | ").append(HostBenchReport.fmt(copies))
                    .append(" | ").append(openMpi == null ? "—" : String.format(Locale.ROOT, "%.2f", openMpi))
                    .append(" | ").append(ratio(openMpi, threads, true))
                    .append(" | ").append(ratio(openMpi, processes, true))
                    .append(" | ").append(ratio(copiesMicros, threads, false))
                    .append(" | ").append(ratio(copiesMicros, processes, false))
                    .append(" |\n");
            String suffix = " " + HostBenchReport.size(bytes) + " (" + waits.name().toLowerCase(Locale.ROOT) + " waits)";
            if (openMpi != null && threads != null && threads.micros() > openMpi) {
                slowerThanMpi.add("threads" + suffix);
            }
            if (openMpi != null && processes != null && processes.micros() > openMpi) {
                slowerThanMpi.add("processes" + suffix);
            }
        }
    }

    /**
     * {@code reference / ours} ("× MPI", with a ×) or {@code ours / reference} ("/ memcpy"); a dash when
     * either is missing.
     */
    private static String ratio(Double reference, Score ours, boolean referenceOverOurs) {
        if (reference == null || ours == null) {
            return "—";
        }
        return referenceOverOurs ? String.format(Locale.ROOT, "%.2f×", reference / ours.micros())
                : String.format(Locale.ROOT, "%.2f", ours.micros() / reference);
    }
}
