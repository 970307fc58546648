package org.symmem4j.benchmarks;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLongArray;

import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.state.ParameterCache;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Issue #33's parameter-cache switch: how long after the owner swaps in a new version of a large entry (100 MB by
 * default) a reader on another rank sees it. Rank 0 owns the entry and replaces it {@code --swaps} times with
 * {@link ParameterCache#put} (which copies the new bytes into a fresh block of its own part, then publishes it with
 * one seqlock write); rank 1 spins on {@link ParameterCache#get(int, String)} and notes when each version first
 * appears, reading the entry's first and last values through the zero-copy view. Per swap:
 * <ul>
 *   <li><b>switch seen by the reader</b>: the reader's clock when its get first returned the new version minus the
 *       owner's clock when put returned (both {@link System#nanoTime()}, one JVM); a reader that saw the version before
 *       put returned (the publish comes before put's book-keeping) counts as 0;</li>
 *   <li><b>reader get</b>: every get the reader made while the swaps ran (a 100 MB entry costs what any entry costs:
 *       no copy);</li>
 *   <li><b>owner put</b>: the owner's whole put, the copy into its part included (readers keep the previous version
 *       meanwhile);</li>
 *   <li><b>baseline, copy for readers</b>: a reader copying the entry out ({@link MemorySegment#copy}), what a cache
 *       without zero-copy views would cost each reader per switch, measured in the same run.</li>
 * </ul>
 * Ranks are threads of one JVM: the reader reads the owner's part through the mapping exactly as a process would.
 *
 * <pre>
 *   ParameterCacheSwitchBench [--bytes B] [--swaps N] [--out report.md]
 * </pre>
 */
public final class ParameterCacheSwitchBench {

    private ParameterCacheSwitchBench() {
    }

    @Command(name = "ParameterCacheSwitchBench", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Parameter cache: switch latency of a large entry as a reader on"
                    + " another rank observes it, against a reader's copy of the entry.")
    static final class Flags {
        @Option(names = "--bytes", paramLabel = "B", description = "entry bytes (a multiple of 8)")
        long bytes = 100_000_000L;
        @Option(names = "--swaps", paramLabel = "N", description = "versions swapped in")
        int swaps = 40;
        @Option(names = "--out", paramLabel = "FILE", description = "also write the markdown report to FILE")
        Path out;
    }

    /** What the run measured, nanoseconds. */
    record Result(long[] seenNanos, int seenBeforePutReturned, long[] putNanos, long[] getNanos, long[] copyNanos) {
    }

    public static void main(String[] args) throws IOException {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--swaps", f.swaps);
            if (f.bytes < 16 || f.bytes % 8 != 0) {
                throw new IllegalArgumentException("--bytes=" + f.bytes + " expected a multiple of 8, at least 16");
            }
            return f;
        });
        Result r = run(flags.bytes, flags.swaps);
        String report = report(r, flags.bytes, flags.swaps);
        System.out.print(report);
        if (flags.out != null) {
            Files.writeString(flags.out, report);
        }
    }

    static Result run(long bytes, int swaps) {
        String name = "model/weights";
        // per version v (1..swaps): when put returned on the owner, when the reader first saw it
        AtomicLongArray putReturned = new AtomicLongArray(swaps + 2);
        AtomicLongArray seen = new AtomicLongArray(swaps + 2);
        long[] putNanos = new long[swaps];
        long[][] gets = new long[1][];
        long[] copyNanos = new long[5];
        InJvmWorld.runOnEveryRank(2, GroupOptions.defaults().withTimeout(Duration.ofSeconds(600)), group -> {
            // three blocks: the version readers may still hold, the current one, the one being written
            try (ParameterCache cache = ParameterCache.create(group, 3 * (bytes + 4096), 4);
                 Arena arena = Arena.ofConfined()) {
                if (group.rank() == 0) {
                    MemorySegment[] sources = {arena.allocate(bytes, 64), arena.allocate(bytes, 64)};
                    long first = cache.put(name, stamp(sources[0], 0));
                    group.allGatherBytes("switch-start", new byte[0]);
                    for (int i = 1; i <= swaps; i++) {
                        MemorySegment src = stamp(sources[i & 1], i);
                        long t0 = System.nanoTime();
                        long v = cache.put(name, src);
                        long t1 = System.nanoTime();
                        if (v - first != i) {
                            throw new IllegalStateException("put returned version " + v + ", expected " + (first + i));
                        }
                        putReturned.set(i, t1);
                        putNanos[i - 1] = t1 - t0;
                        while (seen.get(i) == 0) {
                            Thread.onSpinWait(); // one swap at a time: the next starts once this one was seen
                        }
                    }
                    group.allGatherBytes("switch-end", new byte[0]);
                } else {
                    group.allGatherBytes("switch-start", new byte[0]);
                    long[] getSamples = new long[1 << 22];
                    int n = 0;
                    long base = -1;
                    int last = 0;
                    while (last < swaps) {
                        long t0 = System.nanoTime();
                        ParameterCache.Entry e = cache.get(0, name);
                        long t1 = System.nanoTime();
                        getSamples[n++ & (getSamples.length - 1)] = t1 - t0;
                        if (base < 0) {
                            base = e.version();
                        }
                        int v = (int) (e.version() - base);
                        if (v > last) {
                            MemorySegment d = e.data();
                            long head = d.get(ValueLayout.JAVA_LONG, 0);
                            long tail = d.get(ValueLayout.JAVA_LONG, bytes - 8);
                            if (e.isValid() && (head != v || tail != v)) {
                                throw new IllegalStateException("version " + v + " read head=" + head + " tail=" + tail
                                        + ": a torn or wrong entry");
                            }
                            seen.set(v, t1);
                            last = v;
                        }
                    }
                    gets[0] = Arrays.copyOf(getSamples, Math.min(n, getSamples.length));
                    // the baseline: this reader copying the entry out, as a copying cache would per switch
                    MemorySegment own = arena.allocate(bytes, 64);
                    for (int k = 0; k < copyNanos.length; k++) {
                        ParameterCache.Entry e = cache.get(0, name);
                        long t0 = System.nanoTime();
                        MemorySegment.copy(e.data(), 0, own, 0, bytes);
                        copyNanos[k] = System.nanoTime() - t0;
                    }
                    group.allGatherBytes("switch-end", new byte[0]);
                }
            }
            return null;
        });
        long[] seenNanos = new long[swaps];
        int early = 0;
        for (int i = 1; i <= swaps; i++) {
            long d = seen.get(i) - putReturned.get(i);
            if (d < 0) {
                early++;
            }
            seenNanos[i - 1] = Math.max(0, d);
        }
        return new Result(seenNanos, early, putNanos, gets[0], copyNanos);
    }

    /** Writes {@code version} as the segment's first and last long (the reader checks both). */
    private static MemorySegment stamp(MemorySegment s, long version) {
        s.set(ValueLayout.JAVA_LONG, 0, version);
        s.set(ValueLayout.JAVA_LONG, s.byteSize() - 8, version);
        return s;
    }

    private static double pct(long[] v, double p) {
        long[] s = v.clone();
        Arrays.sort(s);
        return s[(int) Math.min(s.length - 1, Math.round(p * (s.length - 1)))];
    }

    static String report(Result r, long bytes, int swaps) {
        StringBuilder md = new StringBuilder("# Parameter cache switch of a large entry (issue #33)\n\n");
        md.append("- date: ").append(Instant.now()).append('\n');
        md.append("- machine: ").append(Runtime.getRuntime().availableProcessors()).append(" CPUs visible to the JVM, ")
                .append(System.getProperty("java.vm.name")).append(' ').append(System.getProperty("java.version")).append('\n');
        md.append("- entry: ").append(bytes).append(" bytes, ").append(swaps).append(" swaps; owner rank 0, reader rank 1")
                .append(" (threads of one JVM, the reader through the owner's mapped part)\n\n");
        md.append("| what | p50 µs | p99 µs | max µs | samples |\n|---|---:|---:|---:|---:|\n");
        row(md, "switch seen by the reader (get returns the new version, after put returned)", r.seenNanos());
        row(md, "reader get during the swaps (zero-copy view)", r.getNanos());
        row(md, "owner put (copy into its part + publish; readers keep the old version meanwhile)", r.putNanos());
        row(md, "baseline: a reader copying the entry out (a copying cache, per reader per switch)", r.copyNanos());
        md.append('\n').append(r.seenBeforePutReturned()).append(" of ").append(swaps)
                .append(" versions were seen before the owner's put returned (counted as 0).\n\n");
        double p99 = pct(r.seenNanos(), 0.99) / 1000.0;
        md.append(String.format(Locale.ROOT, "Target (< 100 µs for readers, no copy): switch seen p99 = %.2f µs: %s.%n",
                p99, p99 < 100 ? "met" : "not met"));
        return md.toString();
    }

    private static void row(StringBuilder md, String what, long[] v) {
        md.append(String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.2f | %d |%n", what, pct(v, 0.5) / 1000.0,
                pct(v, 0.99) / 1000.0, pct(v, 1.0) / 1000.0, v.length));
    }
}
