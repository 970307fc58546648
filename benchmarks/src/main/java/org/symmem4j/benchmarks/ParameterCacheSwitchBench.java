package org.symmem4j.benchmarks;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.locks.LockSupport;

import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.ParameterCache;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Issue #33's parameter-cache switch: how long after the owner swaps in a new version of a large entry (100 MB by
 * default) a reader on another rank sees it. Rank 0 owns the entry and replaces it {@code --warmup-swaps} +
 * {@code --swaps} times with {@link ParameterCache#put} (which copies the new bytes into a fresh block of its own part,
 * then publishes it with one seqlock write), {@code --gap-ms} apart; rank 1 polls {@link ParameterCache#version},
 * which allocates nothing, and when the version changed takes the zero-copy view with
 * {@link ParameterCache#get(int, String)} and checks the entry's first and last values. Before the swaps the reader
 * polls and gets the first version {@value #WARM_UP_CALLS} times, so both calls run compiled, as in a reader that
 * serves requests. Per measured swap:
 * <ul>
 *   <li><b>switch seen by the reader</b>: the reader's clock when its get of the new version returned minus the
 *       owner's clock when put returned ({@link System#nanoTime()}: one clock for the threads of a JVM and, on Linux,
 *       for the processes of a host); a reader that had the view before put returned (the publish comes before put's
 *       book-keeping) counts as 0;</li>
 *   <li><b>reader poll</b>: every {@link ParameterCache#version} call while the swaps ran; <b>reader get</b>: the
 *       get that took each new version's view (a 100 MB entry costs what any entry costs: no copy);</li>
 *   <li><b>owner put</b>: the owner's whole put, the copy into its part included (readers keep the previous version
 *       meanwhile);</li>
 *   <li><b>baseline, copy for readers</b>: a reader copying the entry out ({@link MemorySegment#copy}), what a cache
 *       without zero-copy views would cost each reader per switch, measured in the same run.</li>
 * </ul>
 * The reader's JVM's garbage collections are counted: one between put and the reader's view delays the view by its
 * pause (every thread of that JVM stops), and the report says how many late switches had one. With
 * {@code --processes} the reader is a JVM of its own ({@link BenchPeer}), as a serving or trainer process would be,
 * so the owner's collections cannot stop it; by default the ranks are threads of one JVM, the reader reading the
 * owner's part through the mapping exactly as a process would. {@code -Dsymmem4j.bench.cpus=A,B} pins the owner to
 * A and the reader to B. {@code --poll get} makes the reader poll with a get (a view per poll, garbage the reader's JVM
 * collects), as this benchmark did before {@link ParameterCache#version} existed: the comparison in one run.
 *
 * <pre>
 *   ParameterCacheSwitchBench [--bytes B] [--swaps N] [--warmup-swaps W] [--gap-ms G] [--processes]
 *                             [--poll version|get] [--out report.md]
 * </pre>
 */
public final class ParameterCacheSwitchBench {

    /** The switch target of issue #33, microseconds: readers see a new version this soon, with no copy. */
    static final double TARGET_MICROS = 100;

    private static final String NAME = "model/weights";

    /** Polls and gets the reader makes on the first version before the swaps, so both run compiled. */
    private static final int WARM_UP_CALLS = 200_000;

    private ParameterCacheSwitchBench() {
    }

    @Command(name = "ParameterCacheSwitchBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Parameter cache: switch latency of a large entry as a reader on"
                    + " another rank observes it, against a reader's copy of the entry.")
    static final class Flags {
        @Option(names = "--bytes", paramLabel = "B", description = "entry bytes (a multiple of 8)")
        long bytes = 100_000_000L;
        @Option(names = "--swaps", paramLabel = "N", description = "versions swapped in and measured")
        int swaps = 200;
        @Option(names = "--warmup-swaps", paramLabel = "W", description = "versions swapped in first, not measured")
        int warmupSwaps = 10;
        @Option(names = "--gap-ms", paramLabel = "G", description = "the owner's pause after each put returned")
        int gapMillis = 2;
        @Option(names = "--processes", description = "the reader as a JVM of its own (default: threads of one JVM)")
        boolean processes;
        @Option(names = "--poll", paramLabel = "HOW", description = "how the reader polls: version (allocates"
                + " nothing) or get (a view per poll: the benchmark's reader before ParameterCache.version existed)")
        Poll poll = Poll.version;
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
    }

    /** How the reader polls for a new version. */
    enum Poll {
        /** {@link ParameterCache#version}, then a get once it changed: allocates nothing while it waits. */
        version,
        /** {@link ParameterCache#get(int, String)} every time: a view (a few objects) per poll. */
        get
    }

    /**
     * The reader process's arguments, {@code VERSIONS:POLL} on {@link BenchPeer}'s command line.
     *
     * @param versions the new versions to wait for
     * @param poll     how to poll
     */
    record ReaderArgs(int versions, Poll poll) {
        static ReaderArgs parse(String variant) {
            String[] parts = variant.split(":", 2);
            try {
                return new ReaderArgs(Cli.positive("versions", Integer.parseInt(parts[0])), Poll.valueOf(parts[1]));
            } catch (RuntimeException e) {
                throw new IllegalArgumentException("parameter cache switch reader arguments=" + variant + " expected"
                        + " VERSIONS:POLL, e.g. 410:version (POLL version or get)", e);
            }
        }

        @Override
        public String toString() {
            return versions + ":" + poll;
        }
    }

    /** What the reader measured, sent to rank 0 at the end. */
    record ReaderSide(long[] seenAt, long[] gcsAt, long[] getNanos, long[] pollSummary, long[] copyNanos, long gcs,
                      long gcMillis) {

        byte[] encode() {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                for (long[] a : List.of(seenAt, gcsAt, getNanos, pollSummary, copyNanos)) {
                    out.writeInt(a.length);
                    for (long v : a) {
                        out.writeLong(v);
                    }
                }
                out.writeLong(gcs);
                out.writeLong(gcMillis);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            return bytes.toByteArray();
        }

        static ReaderSide decode(byte[] b) {
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(b))) {
                long[][] a = new long[5][];
                for (int i = 0; i < a.length; i++) {
                    a[i] = new long[in.readInt()];
                    for (int j = 0; j < a[i].length; j++) {
                        a[i][j] = in.readLong();
                    }
                }
                return new ReaderSide(a[0], a[1], a[2], a[3], a[4], in.readLong(), in.readLong());
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    /** What the run measured, nanoseconds, the warm-up swaps left out. */
    record Result(long[] seenNanos, int seenBeforePutReturned, int late, int lateWithGc, long[] putNanos,
                  long[] getNanos, long[] pollSummary, long[] copyNanos, long readerGcs, long readerGcMillis,
                  boolean processes) {
    }

    public static void main(String[] args) throws Exception {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--swaps", f.swaps);
            if (f.warmupSwaps < 0 || f.gapMillis < 0) {
                throw new IllegalArgumentException("--warmup-swaps=" + f.warmupSwaps + " --gap-ms=" + f.gapMillis
                        + " expected both >= 0");
            }
            if (f.bytes < 16 || f.bytes % 8 != 0) {
                throw new IllegalArgumentException("--bytes=" + f.bytes + " expected a multiple of 8, at least 16");
            }
            return f;
        });
        int cpus = Runtime.getRuntime().availableProcessors(); // before the owner (this thread) may be pinned to one
        Result r = run(flags.bytes, flags.warmupSwaps, flags.swaps, flags.gapMillis * 1_000_000L, flags.processes,
                flags.poll);
        String report = report(r, flags, cpus);
        System.out.print(report);
        if (flags.out != null) {
            Files.writeString(flags.out, report);
        }
    }

    static Result run(long bytes, int warmups, int swaps, long gapNanos, boolean processes, Poll poll)
            throws Exception {
        GroupOptions options = GroupOptions.defaults().withTimeout(Duration.ofSeconds(600));
        int total = warmups + swaps;
        if (processes) {
            PeerProcess peer = PeerProcess.start(options, BenchPeer.SWITCH, Long.toString(bytes),
                    new ReaderArgs(total, poll).toString());
            Result r = owner(peer.group(), bytes, warmups, total, gapNanos, true);
            peer.close();
            return r;
        }
        Result[] result = new Result[1];
        InJvmWorld.runOnEveryRank(2, options, group -> {
            if (group.rank() == 0) {
                result[0] = owner(group, bytes, warmups, total, gapNanos, false);
            } else {
                reader(group, bytes, total, poll);
            }
            return null;
        });
        return result[0];
    }

    private static ParameterCache cache(Group group, long bytes) {
        // three blocks: the version readers may still hold, the current one, the one being written
        return ParameterCache.create(group, 3 * (bytes + 4096), 4);
    }

    /** Rank 0: swaps the entry in {@code total} times, then collects what the reader measured. */
    static Result owner(Group group, long bytes, int warmups, int total, long gapNanos, boolean processes) {
        BenchCpus.pinCurrentThread(BenchCpus.PRODUCER, "parameter cache owner");
        long[] putReturned = new long[total + 1];
        long[] putNanos = new long[total + 1];
        byte[] readerBytes;
        try (ParameterCache cache = cache(group, bytes); Arena arena = Arena.ofConfined()) {
            MemorySegment[] sources = {arena.allocate(bytes, 64), arena.allocate(bytes, 64)};
            long first = cache.put(NAME, stamp(sources[0], 0));
            group.allGatherBytes("switch-ready", new byte[0]); // the reader warms up its poll and get on it
            group.allGatherBytes("switch-start", new byte[0]);
            for (int i = 1; i <= total; i++) {
                MemorySegment src = stamp(sources[i & 1], i);
                long t0 = System.nanoTime();
                long v = cache.put(NAME, src);
                long t1 = System.nanoTime();
                if (v - first != i) {
                    throw new IllegalStateException("put returned version " + v + ", expected " + (first + i));
                }
                putReturned[i] = t1;
                putNanos[i] = t1 - t0;
                LockSupport.parkNanos(gapNanos);
            }
            readerBytes = group.allGatherBytes("switch-end", new byte[0]).get(1);
        }
        ReaderSide reader = ReaderSide.decode(readerBytes);
        int n = total - warmups;
        long[] seen = new long[n];
        int early = 0;
        int late = 0;
        int lateWithGc = 0;
        for (int i = warmups + 1; i <= total; i++) {
            long d = reader.seenAt()[i] - putReturned[i];
            if (d < 0) {
                early++;
            }
            seen[i - warmups - 1] = Math.max(0, d);
            if (d > TARGET_MICROS * 1000) {
                late++;
                if (reader.gcsAt()[i] > reader.gcsAt()[i - 1]) {
                    lateWithGc++;
                }
            }
        }
        return new Result(seen, early, late, lateWithGc, Arrays.copyOfRange(putNanos, warmups + 1, total + 1),
                Arrays.copyOfRange(reader.getNanos(), warmups + 1, total + 1), reader.pollSummary(),
                reader.copyNanos(), reader.gcs(), reader.gcMillis(), processes);
    }

    /**
     * Rank 1: polls the version until it has seen {@code total} new ones, taking each one's view, then copies the
     * entry out five times (the baseline) and sends what it measured to rank 0.
     */
    static void reader(Group group, long bytes, int total, Poll poll) {
        BenchCpus.pinCurrentThread(BenchCpus.CONSUMER, "parameter cache reader");
        List<GarbageCollectorMXBean> collectors = ManagementFactory.getGarbageCollectorMXBeans();
        long[] seenAt = new long[total + 1];
        long[] gcsAt = new long[total + 1];
        long[] getNanos = new long[total + 1];
        long[] polls = new long[1 << 22]; // the newest 4 M polls
        long[] copyNanos = new long[5];
        long gcs0;
        long gcMillis0;
        try (ParameterCache cache = cache(group, bytes); Arena arena = Arena.ofConfined()) {
            group.allGatherBytes("switch-ready", new byte[0]);
            // compiled before the swaps: a get made once per switch would otherwise run interpreted (~10-30 µs),
            // while a reader serving requests gets all the time
            long warm = 0;
            for (int i = 0; i < WARM_UP_CALLS; i++) {
                warm += cache.version(0, NAME) + cache.get(0, NAME).data().get(ValueLayout.JAVA_LONG, 0);
            }
            if (warm != WARM_UP_CALLS * cache.version(0, NAME)) {
                throw new IllegalStateException("the reader's warm-up read another version than the first");
            }
            group.allGatherBytes("switch-start", new byte[0]);
            long base = cache.version(0, NAME);
            gcs0 = collections(collectors);
            gcMillis0 = collectionMillis(collectors);
            gcsAt[0] = gcs0;
            int n = 0;
            long last = 0;
            while (last < total) {
                long t0 = System.nanoTime();
                ParameterCache.Entry polled = poll == Poll.get ? cache.get(0, NAME) : null;
                long v = (polled != null ? polled.version() : cache.version(0, NAME)) - base;
                long t1 = System.nanoTime();
                polls[n++ & (polls.length - 1)] = t1 - t0;
                if (v > last) {
                    ParameterCache.Entry e = polled != null ? polled : cache.get(0, NAME);
                    long t2 = System.nanoTime();
                    long ev = e.version() - base; // a newer put may have published since the poll
                    MemorySegment d = e.data();
                    long head = d.get(ValueLayout.JAVA_LONG, 0);
                    long tail = d.get(ValueLayout.JAVA_LONG, bytes - 8);
                    if (e.isValid() && (head != ev || tail != ev)) {
                        throw new IllegalStateException("version " + ev + " read head=" + head + " tail=" + tail
                                + ": a torn or wrong entry");
                    }
                    long gcs = collections(collectors);
                    for (long k = last + 1; k <= ev; k++) { // a version skipped counts as seen now (late)
                        seenAt[(int) k] = t2;
                        gcsAt[(int) k] = gcs;
                        getNanos[(int) k] = t2 - t1;
                    }
                    last = ev;
                }
            }
            long[] pollSample = Arrays.copyOf(polls, Math.min(n, polls.length));
            Arrays.sort(pollSample);
            long[] pollSummary = {n, at(pollSample, 0.5), at(pollSample, 0.99), pollSample[pollSample.length - 1]};
            // the baseline: this reader copying the entry out, as a copying cache would per switch
            MemorySegment own = arena.allocate(bytes, 64);
            for (int k = 0; k < copyNanos.length; k++) {
                ParameterCache.Entry e = cache.get(0, NAME);
                long t0 = System.nanoTime();
                MemorySegment.copy(e.data(), 0, own, 0, bytes);
                copyNanos[k] = System.nanoTime() - t0;
            }
            ReaderSide side = new ReaderSide(seenAt, gcsAt, getNanos, pollSummary, copyNanos,
                    collections(collectors) - gcs0, collectionMillis(collectors) - gcMillis0);
            group.allGatherBytes("switch-end", side.encode());
        }
    }

    private static long collections(List<GarbageCollectorMXBean> collectors) {
        long n = 0;
        for (GarbageCollectorMXBean c : collectors) {
            n += Math.max(0, c.getCollectionCount());
        }
        return n;
    }

    private static long collectionMillis(List<GarbageCollectorMXBean> collectors) {
        long ms = 0;
        for (GarbageCollectorMXBean c : collectors) {
            ms += Math.max(0, c.getCollectionTime());
        }
        return ms;
    }

    /** Writes {@code version} as the segment's first and last long (the reader checks both). */
    private static MemorySegment stamp(MemorySegment s, long version) {
        s.set(ValueLayout.JAVA_LONG, 0, version);
        s.set(ValueLayout.JAVA_LONG, s.byteSize() - 8, version);
        return s;
    }

    private static long at(long[] sorted, double p) {
        return sorted[(int) Math.min(sorted.length - 1, Math.round(p * (sorted.length - 1)))];
    }

    private static double pct(long[] v, double p) {
        long[] s = v.clone();
        Arrays.sort(s);
        return at(s, p);
    }

    static String report(Result r, Flags f, int cpus) {
        StringBuilder md = new StringBuilder("# Parameter cache switch of a large entry (issue #33)\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- machine: ").append(cpus).append(" CPUs visible to the JVM, ")
                .append(System.getProperty("java.vm.name")).append(' ').append(System.getProperty("java.version"))
                .append(", pinned: ").append(System.getProperty(BenchCpus.PROPERTY, "no")).append('\n');
        md.append("- entry: ").append(f.bytes).append(" bytes, ").append(f.swaps).append(" swaps measured after ")
                .append(f.warmupSwaps).append(" not measured, ").append(f.gapMillis)
                .append(" ms after each put; the reader polls by ").append(f.poll).append("; owner rank 0, reader rank 1 ")
                .append(r.processes() ? "(two JVMs, the reader through its mapping of the owner's part)"
                        : "(threads of one JVM, the reader through the owner's mapped part)").append("\n\n");
        md.append("| what | p50 µs | p99 µs | max µs | samples |\n|---|---:|---:|---:|---:|\n");
        row(md, "switch seen by the reader (its get of the new version returned, after put returned)", r.seenNanos());
        long[] p = r.pollSummary();
        md.append(String.format(Locale.ROOT, "| reader poll (%s) | %.2f | %.2f | %.2f | %d |%n", f.poll == Poll.get
                        ? "get: a view per poll" : "version: allocates nothing",
                p[1] / 1000.0, p[2] / 1000.0, p[3] / 1000.0, p[0]));
        row(md, f.poll == Poll.get ? "reader get of each new version (the poll itself)"
                : "reader get of each new version (zero-copy view)", r.getNanos());
        row(md, "owner put (copy into its part + publish; readers keep the old version meanwhile)", r.putNanos());
        row(md, "baseline: a reader copying the entry out (a copying cache, per reader per switch)", r.copyNanos());
        md.append('\n').append(r.seenBeforePutReturned()).append(" of ").append(f.swaps)
                .append(" versions were seen before the owner's put returned (counted as 0). ")
                .append(r.late()).append(r.late() == 1 ? " switch" : " switches").append(" took longer than ").append((long) TARGET_MICROS).append(" µs, ")
                .append(r.lateWithGc()).append(" of them with a garbage collection in the reader's JVM since the")
                .append(" previous switch; that JVM collected ").append(r.readerGcs())
                .append(r.readerGcs() == 1 ? " time (" : " times (")
                .append(r.readerGcMillis()).append(" ms) while the swaps ran.\n\n");
        double p99 = pct(r.seenNanos(), 0.99) / 1000.0;
        double p50 = pct(r.seenNanos(), 0.5) / 1000.0;
        md.append(String.format(Locale.ROOT, "Target (< %.0f µs for readers, no copy): switch seen p50 = %.2f µs (%s),"
                        + " p99 = %.2f µs (%s).%n", TARGET_MICROS, p50, p50 < TARGET_MICROS ? "met" : "not met", p99,
                p99 < TARGET_MICROS ? "met" : "not met"));
        return md.toString();
    }

    private static void row(StringBuilder md, String what, long[] v) {
        md.append(String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.2f | %d |%n", what, pct(v, 0.5) / 1000.0,
                pct(v, 0.99) / 1000.0, pct(v, 1.0) / 1000.0, v.length));
    }
}
