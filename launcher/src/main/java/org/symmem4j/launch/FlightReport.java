package org.symmem4j.launch;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/**
 * {@code symmem4j-flight-report}: merges the flight-recorder dumps of every rank of a job (the JSON files
 * each rank writes when a collective fails, {@code symmem4j.flight.recorder.dir}) into one report per
 * communicator: where each rank is, where they diverged (the first collective some ranks entered and
 * others did not, or entered with different arguments), which ranks left no dump, and each rank's last
 * collectives. PyTorch's {@code torch.distributed.flight_recorder} trace analyzer is the model.
 */
@Command(name = "symmem4j-flight-report", mixinStandardHelpOptions = true,
        description = {"Merges the flight-recorder dumps of all ranks into one report: where the ranks diverged.",
                "Give the dump directory (default of symmem4j.flight.recorder.dir: ${java.io.tmpdir}/"
                        + "symmem4j-flight-recorder) or dump files."})
public final class FlightReport implements Callable<Integer> {

    /** Exit status when no dump was found. */
    static final int NO_DUMPS = 3;

    @Parameters(arity = "1..*", paramLabel = "DUMP", description = "dump files (flight-*.json) or directories holding them")
    List<Path> inputs;

    @Option(names = "--last", defaultValue = "8", paramLabel = "N", description = "collectives shown per rank (default ${DEFAULT-VALUE})")
    int last;

    @Option(names = "--run", paramLabel = "RUN_ID", description = "only the dumps of this run id")
    String run;

    private final PrintStream out;

    FlightReport(PrintStream out) {
        this.out = out;
    }

    /**
     * Runs the report.
     *
     * @param args the command line
     */
    public static void main(String[] args) {
        System.exit(new CommandLine(new FlightReport(System.out)).execute(args));
    }

    /** One collective of a dump. */
    record Op(long seq, String op, String kind, String dtype, String reduceOp, String algorithm, long count, long bytes,
              long memoryId, String state, long begunMillis, long endedMillis) {

        String label() {
            return op + "#" + seq;
        }

        /** The arguments every rank must agree on, for comparing ranks. */
        String arguments() {
            return op + " count=" + count + " dtype=" + dtype + " op=" + reduceOp + " algorithm=" + algorithm
                    + " region=" + memoryId;
        }
    }

    /** One rank's dump of one communicator. */
    record Dump(Path file, String runId, String generation, String communicator, int worldSize, int rank, String reason,
                long dumpedAtMillis, List<Op> ops) {

        Op lastOp() {
            return ops.isEmpty() ? null : ops.getLast();
        }

        Op op(long seq) {
            for (Op o : ops) {
                if (o.seq() == seq) {
                    return o;
                }
            }
            return null;
        }
    }

    @Override
    public Integer call() throws IOException {
        List<Dump> dumps = new ArrayList<>();
        for (Path in : inputs) {
            if (Files.isDirectory(in)) {
                try (Stream<Path> files = Files.list(in)) {
                    for (Path f : files.filter(p -> p.getFileName().toString().matches("flight-.*\\.json")).sorted().toList()) {
                        dumps.add(read(f));
                    }
                }
            } else if (Files.isRegularFile(in)) {
                dumps.add(read(in));
            } else {
                throw new CommandLine.ParameterException(new CommandLine(this), "no such file or directory: " + in
                        + " (give flight-recorder dumps or the directory symmem4j.flight.recorder.dir names)");
            }
        }
        if (run != null) {
            dumps.removeIf(d -> !run.equals(d.runId()));
        }
        if (dumps.isEmpty()) {
            out.println("no flight-recorder dumps (flight-*.json) in " + inputs + (run == null ? "" : " for run " + run)
                    + ": ranks write them only when a collective fails");
            return NO_DUMPS;
        }
        out.print(report(dumps, last));
        return 0;
    }

    /** Reads one dump, naming the file in any error. */
    static Dump read(Path file) {
        try {
            JsonNode j = new ObjectMapper().readTree(Files.readString(file, StandardCharsets.UTF_8));
            if (!"symmem4j-flight-recorder/1".equals(j.path("format").asText())) {
                throw new IllegalArgumentException(file + ": format=" + j.path("format").asText("missing")
                        + ", expected symmem4j-flight-recorder/1 (a dump of another version, or not a dump;"
                        + " fix: give the flight-*.json files a symmem4j of this version dumped)");
            }
            List<Op> ops = new ArrayList<>();
            for (JsonNode o : j.path("ops")) {
                ops.add(new Op(o.path("seq").asLong(), o.path("op").asText(), text(o, "kind"), text(o, "dtype"),
                        text(o, "reduceOp"), text(o, "algorithm"), o.path("count").asLong(-1), o.path("bytes").asLong(-1),
                        o.path("memoryId").asLong(-1), o.path("state").asText(), o.path("begunMillis").asLong(),
                        o.path("endedMillis").asLong()));
            }
            return new Dump(file, text(j, "runId"), text(j, "generation"), j.path("communicator").asText(),
                    j.path("worldSize").asInt(), j.path("rank").asInt(), j.path("reason").asText(),
                    j.path("dumpedAtMillis").asLong(), ops);
        } catch (IOException e) {
            throw new UncheckedIOException(file + ": not readable as a flight-recorder dump: " + e.getMessage()
                    + " (fix: give the flight-*.json files the flight recorder dumped, whole)", e);
        }
    }

    private static String text(JsonNode node, String field) {
        JsonNode v = node.get(field);
        return v == null || v.isNull() ? null : v.asText();
    }

    /**
     * The report of {@code dumps}: one section per (run, generation, communicator, world size).
     *
     * @param dumps the dumps
     * @param last  collectives shown per rank
     * @return the report's text
     */
    static String report(List<Dump> dumps, int last) {
        Map<String, List<Dump>> byCommunicator = new TreeMap<>();
        for (Dump d : dumps) {
            String key = "run " + (d.runId() == null ? "local" : d.runId()) + ", generation "
                    + (d.generation() == null ? "0" : d.generation()) + ", communicator " + d.communicator() + " of "
                    + d.worldSize() + " ranks";
            byCommunicator.computeIfAbsent(key, k -> new ArrayList<>()).add(d);
        }
        StringBuilder b = new StringBuilder();
        for (Map.Entry<String, List<Dump>> e : byCommunicator.entrySet()) {
            section(b, e.getKey(), e.getValue(), last);
        }
        return b.toString();
    }

    private static void section(StringBuilder b, String title, List<Dump> dumps, int last) {
        int worldSize = dumps.getFirst().worldSize();
        Map<Integer, Dump> byRank = new TreeMap<>();
        for (Dump d : dumps) {
            // several dumps of one rank (it failed more than once): the newest tells where it ended up
            byRank.merge(d.rank(), d, (a, c) -> c.dumpedAtMillis() >= a.dumpedAtMillis() ? c : a);
        }
        b.append("== ").append(title).append('\n');
        List<Integer> missing = new ArrayList<>();
        for (int r = 0; r < worldSize; r++) {
            if (!byRank.containsKey(r)) {
                missing.add(r);
            }
        }
        // where each rank is: its newest collective and that collective's state
        Map<String, List<Integer>> places = new LinkedHashMap<>();
        long highest = -1;
        long lowest = Long.MAX_VALUE;
        for (Dump d : byRank.values()) {
            Op o = d.lastOp();
            String place = o == null ? "recorded no collective"
                    : o.kind() == null ? "at " + o.label() + " (" + o.state() + " before arriving)"
                    : "at " + o.label() + " (" + o.state() + ")";
            places.computeIfAbsent(place, k -> new ArrayList<>()).add(d.rank());
            long s = o == null ? -1 : o.seq();
            highest = Math.max(highest, s);
            lowest = Math.min(lowest, s);
        }
        b.append("where the ranks are: ");
        boolean first = true;
        for (Map.Entry<String, List<Integer>> p : places.entrySet()) {
            b.append(first ? "" : "; ").append(ranks(p.getValue())).append(' ').append(p.getKey());
            first = false;
        }
        if (!missing.isEmpty()) {
            b.append("; ").append(ranks(missing)).append(" left")
                    .append(" no dump (never failed in a collective of this communicator: dead, hung, busy outside"
                            + " collectives, or writing to another directory)");
        }
        b.append('\n');
        b.append("diverged: ").append(divergence(byRank, highest, lowest, missing)).append('\n');
        for (Dump d : byRank.values()) {
            b.append("rank ").append(d.rank()).append(" (").append(d.file().getFileName()).append(", dumped ")
                    .append(Instant.ofEpochMilli(d.dumpedAtMillis())).append("): ").append(d.reason()).append('\n');
            List<Op> ops = d.ops();
            for (Op o : ops.subList(Math.max(0, ops.size() - last), ops.size())) {
                b.append(String.format("  %-28s %-9s %s%n", o.label(), o.state(),
                        o.kind() == null ? "(failed before it arrived: no arguments)" : o.arguments().substring(o.op().length() + 1)));
            }
        }
        b.append('\n');
    }

    /** Where the ranks parted: the first collective not every dumping rank entered alike. */
    private static String divergence(Map<Integer, Dump> byRank, long highest, long lowest, List<Integer> missing) {
        if (highest < 0) {
            return "no rank recorded a collective";
        }
        // the oldest sequence every dump still holds: compare arguments from there on
        long from = 0;
        for (Dump d : byRank.values()) {
            from = Math.max(from, d.ops().isEmpty() ? 0 : d.ops().getFirst().seq());
        }
        for (long s = from; s <= highest; s++) {
            Map<String, List<Integer>> entered = new LinkedHashMap<>();
            List<Integer> notEntered = new ArrayList<>();
            for (Dump d : byRank.values()) {
                Op o = d.op(s);
                if (o == null || o.kind() == null) { // no arguments: it never arrived at the entry barrier
                    notEntered.add(d.rank());
                } else {
                    entered.computeIfAbsent(o.arguments(), k -> new ArrayList<>()).add(d.rank());
                }
            }
            if (!notEntered.isEmpty() && !entered.isEmpty()) {
                List<Integer> in = entered.values().stream().flatMap(List::stream).sorted().toList();
                String what = byRank.get(in.getFirst()).op(s).label();
                StringBuilder why = new StringBuilder();
                for (int r : notEntered) {
                    Op lastIn = null;
                    for (Op o : byRank.get(r).ops()) {
                        if (o.kind() != null && o.seq() < s) {
                            lastIn = o;
                        }
                    }
                    why.append(why.length() == 0 ? "" : "; ").append("rank ").append(r).append("'s last: ")
                            .append(lastIn == null ? "none" : lastIn.label() + " " + lastIn.state());
                    Op later = byRank.get(r).op(s);
                    if (later != null) {
                        why.append(", then called ").append(later.label()).append(" after the group had failed");
                    }
                }
                return ranks(in) + " entered " + what + ", " + ranks(notEntered) + " never did (" + why + ")";
            }
            if (entered.size() > 1) {
                StringBuilder parts = new StringBuilder();
                for (Map.Entry<String, List<Integer>> e : entered.entrySet()) {
                    parts.append(parts.length() == 0 ? "" : "; ").append(ranks(e.getValue())).append(": ").append(e.getKey());
                }
                return "#" + s + " was called with different arguments: " + parts;
            }
        }
        if (!missing.isEmpty()) {
            return "the dumping ranks agree up to #" + highest + "; look at " + ranks(missing)
                    + ", which left no dump (the rank that failed first or never arrived)";
        }
        return "no divergence: every rank entered the same collectives with the same arguments up to #" + highest
                + (lowest == highest ? "" : " (some ranks stopped earlier)");
    }

    private static String ranks(List<Integer> ranks) {
        if (ranks.size() == 1) {
            return "rank " + ranks.getFirst();
        }
        boolean consecutive = ranks.getLast() - ranks.getFirst() == ranks.size() - 1;
        return "ranks " + (consecutive ? ranks.getFirst() + "-" + ranks.getLast()
                : String.join(", ", ranks.stream().map(String::valueOf).toList()));
    }
}
