package org.symmem4j.examples;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

import org.symmem4j.parallel.Group;
import org.symmem4j.state.ParameterCache;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * Hot-swapping adapters while serving, on a {@link ParameterCache}, no DL4J: rank 0 owns two adapters
 * ({@code adapter/a}, {@code adapter/b}: float weights) and puts a new version of each, again and again, while every
 * other rank keeps serving requests with them. A serving rank polls {@link ParameterCache#version(int, String)} before
 * each request (it allocates nothing), takes the new version zero-copy with {@link ParameterCache#get(int, String)}
 * only when it changed, checks that every weight of the view belongs to that one version (no torn read: weight
 * {@code i} of swap {@code s} is {@code s + ((31 i + 17 k) mod 1024) / 1024}), answers the request with a dot product
 * of the weights and a fixed input, checked bitwise, and calls {@link ParameterCache.Entry#isValid()} after reading
 * (a view freed while read is read again, never used). At the end every serving rank must have ended on the last
 * version of both adapters. Then rank 0 shows the LRU eviction: with room for two names, putting a third
 * ({@code adapter/c}) evicts the least recently used one ({@code adapter/a}), and the views the serving ranks still
 * hold of it report invalid.
 *
 * <pre>
 *   java ... org.symmem4j.examples.ParameterCacheExample [--ranks N] [--swaps S] [--size P] [--interval-us U]
 *   bin/symmem4j-run -n 3 --java -cp CLASSPATH org.symmem4j.examples.ParameterCacheExample
 * </pre>
 */
public final class ParameterCacheExample {

    private ParameterCacheExample() {
    }

    @Command(name = "ParameterCacheExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Adapter hot swap on a parameter cache: rank 0 puts new versions"
            + " while the other ranks serve with zero-copy views, each checked whole; then an LRU eviction.")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "N", description = "ranks as threads, at least 2 (rank 0 owns the"
                + " adapters, the others serve); ignored when started by a launcher")
        int ranks = 3;
        @Option(names = "--swaps", paramLabel = "S", description = "new versions of each adapter after the first")
        int swaps = 300;
        @Option(names = "--size", paramLabel = "P", description = "weights per adapter (float32)")
        int size = 4096;
        @Option(names = "--interval-us", paramLabel = "U", description = "microseconds rank 0 pauses between swaps")
        int intervalMicros = 1000;
    }

    /** What one run does: every rank passes the same. */
    record Settings(int swaps, int size, int intervalMicros) {
    }

    /** The owner of every entry. */
    static final int OWNER = 0;
    /** The adapters the serving ranks use; index k of a name is the k in the weight formula. */
    static final List<String> ADAPTERS = List.of("adapter/a", "adapter/b");
    /** The name whose first put evicts the least recently used adapter. */
    static final String NEWCOMER = "adapter/c";
    /** Names each rank's part holds: the two adapters, so a third name evicts one. */
    static final int NAMES_PER_RANK = 2;
    /** Swap stamps stay below 2^14 so that {@link #weight} is exact in float32 (14 + 10 bits of 24). */
    static final int MAX_SWAPS = 10_000;
    /** An entry's bytes: its swap (long), rank 0's clock when the put started (long), then the weights (floats). */
    static final long SWAP = 0;
    static final long PUT_START_NANOS = 8;
    static final long WEIGHTS = 16;
    /** Requests a serving rank answers with one adapter before turning to the other. */
    static final int BATCH = 64;
    private static final long WAIT_NANOS = 60_000_000_000L;
    /** The fix of a failed check: the settings cannot cause one. */
    static final String DEFECT = " (fix: none in the settings; a defect of ParameterCache: report it with this"
            + " message)";

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            Cli.positive("--size", flags.size);
            if (flags.swaps < 1 || flags.swaps > MAX_SWAPS) {
                throw new IllegalArgumentException("--swaps=" + flags.swaps + " expected 1.." + MAX_SWAPS
                        + " (the swap number is part of every weight, exact in float32 only below 2^14; fix: fewer"
                        + " swaps)");
            }
            if (flags.intervalMicros < 0) {
                throw new IllegalArgumentException("--interval-us=" + flags.intervalMicros + " expected >= 0"
                        + " (fix: 0 to swap without a pause)");
            }
            if (flags.ranks < 2) {
                throw new IllegalArgumentException("--ranks=" + flags.ranks + " expected >= 2 (fix: --ranks 2 or"
                        + " more: rank 0 owns the adapters, the others serve)");
            }
            return flags;
        });
        Settings s = new Settings(f.swaps, f.size, f.intervalMicros);
        ExampleRanks.runAndPrintRankZero("ParameterCacheExample", f.ranks, group -> run(group, s), Outcome::line);
    }

    /** Weight {@code i} of adapter {@code k} in its swap {@code s}: exact in float32 for s below 2^14. */
    static float weight(int k, long s, int i) {
        return s + ((i * 31 + k * 17) & 1023) / 1024f;
    }

    /** The fixed input every request multiplies the weights with. */
    static float[] input(int size) {
        float[] x = new float[size];
        for (int i = 0; i < size; i++) {
            x[i] = ((i % 13) - 6) * 0.125f;
        }
        return x;
    }

    /** The answer to a request on adapter {@code k} in swap {@code s}, summed in the order {@link #dot} sums. */
    static float expectedDot(int k, long s, float[] x) {
        float sum = 0;
        for (int i = 0; i < x.length; i++) {
            sum += weight(k, s, i) * x[i];
        }
        return sum;
    }

    /** A request's answer from an entry's weights, read in place. */
    static float dot(MemorySegment entry, float[] x) {
        float sum = 0;
        for (int i = 0; i < x.length; i++) {
            sum += entry.get(ValueLayout.JAVA_FLOAT, WEIGHTS + 4L * i) * x[i];
        }
        return sum;
    }

    /**
     * The first weight of {@code entry} (adapter {@code k}) that does not belong to the swap its header names, or -1
     * when every one does: a torn read (weights of two versions) is a mismatch.
     */
    static int firstForeignWeight(MemorySegment entry, int k, int size) {
        long s = entry.get(ValueLayout.JAVA_LONG, SWAP);
        for (int i = 0; i < size; i++) {
            if (Float.floatToRawIntBits(entry.get(ValueLayout.JAVA_FLOAT, WEIGHTS + 4L * i))
                    != Float.floatToRawIntBits(weight(k, s, i))) {
                return i;
            }
        }
        return -1;
    }

    /** Writes swap {@code s} of adapter {@code k} into {@code buffer}, stamped with rank 0's clock. */
    static void fill(MemorySegment buffer, int k, long s, int size) {
        buffer.set(ValueLayout.JAVA_LONG, SWAP, s);
        for (int i = 0; i < size; i++) {
            buffer.set(ValueLayout.JAVA_FLOAT, WEIGHTS + 4L * i, weight(k, s, i));
        }
        buffer.set(ValueLayout.JAVA_LONG, PUT_START_NANOS, System.nanoTime());
    }

    /**
     * What the run checked and measured, the same on every rank (exchanged at the end).
     *
     * @param servers          serving ranks
     * @param swaps            new versions of each adapter after the first
     * @param size             weights per adapter
     * @param versionsPut      puts rank 0 made of the adapters
     * @param finalVersions    the cache's version of each adapter after the last put
     * @param requests         requests answered by all serving ranks
     * @param switches         new versions the serving ranks took (each checked whole)
     * @param freedWhileRead   views found freed after reading (read again, not used)
     * @param maxSwitchNanos   the largest delay, over serving ranks, from rank 0 starting a put to a serving rank
     *                         holding the new version
     * @param meanSwitchNanos  the mean of those delays
     * @param requestsPerSecond requests answered per second per serving rank, averaged
     * @param evicted          the name putting {@link #NEWCOMER} evicted
     */
    record Outcome(int servers, int swaps, int size, long versionsPut, List<Long> finalVersions, long requests,
                   long switches, long freedWhileRead, long maxSwitchNanos, double meanSwitchNanos,
                   double requestsPerSecond, String evicted) {
        String line() {
            return String.format("parameter cache: rank 0 swapped %d versions of 2 adapters x %d floats while %d"
                    + " serving rank(s) answered %d requests (%.0f/s each), every answer bitwise right; %d switches,"
                    + " every view whole, %d re-read (freed while read); every serving rank ended on the last versions"
                    + " %s; switch delay (put start to view held) max %.1f us, mean %.1f us; putting %s evicted %s"
                    + " (least recently used), views of it report invalid",
                    versionsPut, size, servers, requests, requestsPerSecond, switches, freedWhileRead, finalVersions,
                    maxSwitchNanos / 1e3, meanSwitchNanos / 1e3, NEWCOMER, evicted);
        }
    }

    /** One serving rank's counts, exchanged at the end. */
    private static final int REQUESTS = 0;
    private static final int SWITCHES = 1;
    private static final int FREED = 2;
    private static final int MAX_DELAY = 3;
    private static final int SUM_DELAY = 4;
    private static final int SERVING_NANOS = 5;
    private static final int PUTS = 6;
    private static final int LAST_VERSION = 7; // one per adapter
    private static final int COUNTS = LAST_VERSION + 2;

    /**
     * Runs the example on this rank: rank 0 owns and swaps, the others serve; every rank checks the end state.
     *
     * @param group this rank's group, at least 2 ranks
     * @param s     the same on every rank
     * @return the outcome, the same on every rank
     * @throws IllegalStateException when a check fails: a torn or wrong answer, a serving rank not on the last version,
     *                               an eviction other than the least recently used
     */
    static Outcome run(Group group, Settings s) {
        if (group.worldSize() < 2) {
            throw new IllegalArgumentException("parameter cache example on worldSize=" + group.worldSize()
                    + " expected >= 2 (fix: rank 0 owns, the others serve: run 2 or more ranks)");
        }
        long blockBytes = 64 + ((WEIGHTS + 4L * s.size() + 63) & ~63L);
        // two versions of two adapters, and the fresh block of a put in flight: no put has to free a version early
        long budget = 5 * blockBytes;
        try (ParameterCache cache = ParameterCache.create(group, budget, NAMES_PER_RANK);
             Arena arena = Arena.ofConfined()) {
            MemorySegment buffer = arena.allocate(WEIGHTS + 4L * s.size(), 8);
            return ExampleRanks.abortingOnFailure(group, () -> swapAndServe(group, s, cache, buffer));
        }
    }

    private static Outcome swapAndServe(Group group, Settings s, ParameterCache cache, MemorySegment buffer) {
        long[] mine = new long[COUNTS];
        ParameterCache.Entry[] held = new ParameterCache.Entry[ADAPTERS.size()];
        if (group.rank() == OWNER) {
            for (int k = 0; k < ADAPTERS.size(); k++) {
                fill(buffer, k, 0, s.size());
                cache.put(ADAPTERS.get(k), buffer);
                mine[PUTS]++;
            }
        }
        group.allGatherBytes("parameter-cache-example-published", new byte[0]); // both adapters are in
        if (group.rank() == OWNER) {
            mine[PUTS] += swap(cache, buffer, s, mine);
        } else {
            serve(cache, s, group.rank(), held, mine);
        }
        long[][] all = ExampleRanks.allGatherLongs(group, "parameter-cache-example-served", mine);
        for (int r = 1; r < all.length; r++) {
            for (int k = 0; k < ADAPTERS.size(); k++) {
                if (all[r][LAST_VERSION + k] != all[OWNER][LAST_VERSION + k]) {
                    throw new IllegalStateException("parameter cache example: serving rank=" + r + " ended on "
                            + ADAPTERS.get(k) + " version=" + all[r][LAST_VERSION + k] + ", expected the last one,"
                            + " version=" + all[OWNER][LAST_VERSION + k] + DEFECT);
                }
            }
        }
        String evicted = evictOnce(group, cache, buffer, s, held);
        return outcome(all, s, evicted);
    }


    /** Rank 0: S swaps of each adapter, paced; returns the puts; fills its last versions into {@code mine}. */
    private static long swap(ParameterCache cache, MemorySegment buffer, Settings s, long[] mine) {
        long puts = 0;
        for (int swap = 1; swap <= s.swaps(); swap++) {
            for (int k = 0; k < ADAPTERS.size(); k++) {
                fill(buffer, k, swap, s.size());
                mine[LAST_VERSION + k] = cache.put(ADAPTERS.get(k), buffer); // hot swap: servers switch on their poll
                puts++;
            }
            if (s.intervalMicros() > 0) {
                // pacing, not waiting for anything: new versions come at a rate, as a trainer would publish them
                LockSupport.parkNanos(s.intervalMicros() * 1_000L);
            }
        }
        return puts;
    }

    /**
     * A serving rank: answers requests in batches per adapter until it holds swap S of both, each request after a
     * poll of the adapter's version.
     */
    private static void serve(ParameterCache cache, Settings s, int rank, ParameterCache.Entry[] held, long[] mine) {
        float[] x = input(s.size());
        float[] expected = new float[ADAPTERS.size()];
        long[] heldSwap = {-1, -1};     // the newest swap and version taken of each adapter, even when freed since
        long[] heldVersion = {-1, -1};
        long start = System.nanoTime();
        long deadline = start + WAIT_NANOS;
        while (heldSwap[0] < s.swaps() || heldSwap[1] < s.swaps()) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("parameter cache example: serving rank=" + rank + " holds swaps "
                        + heldSwap[0] + " and " + heldSwap[1] + " of " + ADAPTERS + " after "
                        + WAIT_NANOS / 1_000_000_000L
                        + " s, expected swap " + s.swaps() + " of both (fix: see rank 0's output; it stopped putting)");
            }
            for (int k = 0; k < ADAPTERS.size(); k++) {
                String name = ADAPTERS.get(k);
                for (int j = 0; j < BATCH; j++) {
                    long version = cache.version(OWNER, name); // the poll: allocates nothing within a batch
                    if (version < 0) {
                        throw new IllegalStateException("parameter cache example: " + name + " is not in rank "
                                + OWNER + "'s part, expected it from the first put on (no name is removed or evicted"
                                + " while serving)" + DEFECT);
                    }
                    if (held[k] == null || heldVersion[k] != version) {
                        ParameterCache.Entry e = cache.get(OWNER, name);
                        long heldAt = System.nanoTime();
                        if (e == null) {
                            throw new IllegalStateException("parameter cache example: " + name + " vanished from rank "
                                    + OWNER + " after a poll found version=" + version + DEFECT);
                        }
                        MemorySegment data = e.data();
                        long swap = data.get(ValueLayout.JAVA_LONG, SWAP);
                        long putStart = data.get(ValueLayout.JAVA_LONG, PUT_START_NANOS);
                        int foreign = firstForeignWeight(data, k, s.size());
                        float answer = expectedDot(k, swap, x);
                        if (!e.isValid()) { // freed while read (two newer puts): what was read is not trusted
                            mine[FREED]++;
                            continue;
                        }
                        if (foreign >= 0) {
                            throw new IllegalStateException("parameter cache example: torn read of " + name
                                    + " version=" + e.version() + ": weight " + foreign + " is not swap " + swap
                                    + "'s, though the view reported valid after the read" + DEFECT);
                        }
                        if (e.version() <= heldVersion[k] || swap <= heldSwap[k]) {
                            throw new IllegalStateException("parameter cache example: " + name + " went back from"
                                    + " version=" + heldVersion[k] + " (swap " + heldSwap[k] + ") to version="
                                    + e.version() + " (swap " + swap + "), expected versions to grow" + DEFECT);
                        }
                        held[k] = e;
                        heldSwap[k] = swap;
                        heldVersion[k] = e.version();
                        expected[k] = answer;
                        long delay = heldAt - putStart;
                        mine[SWITCHES]++;
                        mine[MAX_DELAY] = Math.max(mine[MAX_DELAY], delay);
                        mine[SUM_DELAY] += delay;
                    }
                    float answer = dot(held[k].data(), x);  // the request, on rank 0's memory, no copy
                    if (!held[k].isValid()) {
                        mine[FREED]++;                       // two swaps during one request: take the new one
                        held[k] = null;
                        continue;
                    }
                    if (Float.floatToRawIntBits(answer) != Float.floatToRawIntBits(expected[k])) {
                        throw new IllegalStateException("parameter cache example: request on " + name + " swap "
                                + heldSwap[k] + " answered " + answer + ", expected " + expected[k]
                                + " bitwise (the view was valid after the read)" + DEFECT);
                    }
                    mine[REQUESTS]++;
                }
            }
        }
        mine[SERVING_NANOS] = System.nanoTime() - start;
        for (int k = 0; k < ADAPTERS.size(); k++) {
            mine[LAST_VERSION + k] = heldVersion[k];
        }
    }

    /**
     * Rank 0 uses {@code adapter/b} once more, then puts {@link #NEWCOMER}: past the cache's two names, the put evicts
     * the least recently used entry, {@code adapter/a}. Every rank then checks: a is gone, c is whole, and a serving
     * rank's held view of a reports invalid while its view of b stays valid.
     */
    private static String evictOnce(Group group, ParameterCache cache, MemorySegment buffer, Settings s,
                                    ParameterCache.Entry[] held) {
        if (group.rank() == OWNER) {
            if (cache.get(OWNER, ADAPTERS.get(1)) == null) { // a get is a use: b is now more recent than a
                throw new IllegalStateException("parameter cache example: " + ADAPTERS.get(1) + " missing before the"
                        + " eviction, expected both adapters in rank " + OWNER + "'s part" + DEFECT);
            }
            fill(buffer, 2, 0, s.size());
            cache.put(NEWCOMER, buffer);
        }
        group.allGatherBytes("parameter-cache-example-evicted", new byte[0]); // the newcomer is in
        String evicted = cache.version(OWNER, ADAPTERS.get(0)) < 0 ? ADAPTERS.get(0)
                : cache.version(OWNER, ADAPTERS.get(1)) < 0 ? ADAPTERS.get(1) : "nothing";
        if (!evicted.equals(ADAPTERS.get(0))) {
            throw new IllegalStateException("parameter cache example: putting " + NEWCOMER + " evicted " + evicted
                    + ", expected " + ADAPTERS.get(0) + ", the least recently used" + DEFECT);
        }
        ParameterCache.Entry c = cache.get(OWNER, NEWCOMER);
        int foreign = c == null ? 0 : firstForeignWeight(c.data(), 2, s.size());
        if (c == null || foreign >= 0 || !c.isValid()) {
            throw new IllegalStateException("parameter cache example: " + NEWCOMER + " after its put: "
                    + (c == null ? "absent" : "weight " + foreign + " wrong, valid=" + c.isValid())
                    + ", expected it whole" + DEFECT);
        }
        if (group.rank() != OWNER && (held[0].isValid() || !held[1].isValid())) {
            throw new IllegalStateException("parameter cache example: after the eviction rank " + group.rank()
                    + "'s view of " + ADAPTERS.get(0) + " valid=" + held[0].isValid() + " (expected false: evicted),"
                    + " of " + ADAPTERS.get(1) + " valid=" + held[1].isValid() + " (expected true: untouched)"
                    + DEFECT);
        }
        group.allGatherBytes("parameter-cache-example-checked", new byte[0]); // every view checked before the close
        return evicted;
    }

    private static Outcome outcome(long[][] all, Settings s, String evicted) {
        long requests = 0;
        long switches = 0;
        long freed = 0;
        long maxDelay = 0;
        long sumDelay = 0;
        double rate = 0;
        int servers = all.length - 1;
        for (int r = 1; r < all.length; r++) {
            requests += all[r][REQUESTS];
            switches += all[r][SWITCHES];
            freed += all[r][FREED];
            maxDelay = Math.max(maxDelay, all[r][MAX_DELAY]);
            sumDelay += all[r][SUM_DELAY];
            rate += all[r][REQUESTS] / (all[r][SERVING_NANOS] / 1e9) / servers;
        }
        List<Long> finalVersions = List.of(all[OWNER][LAST_VERSION], all[OWNER][LAST_VERSION + 1]);
        return new Outcome(servers, s.swaps(), s.size(), all[OWNER][PUTS], finalVersions, requests, switches, freed,
                maxDelay, switches == 0 ? 0 : (double) sumDelay / switches, rate, evicted);
    }
}
