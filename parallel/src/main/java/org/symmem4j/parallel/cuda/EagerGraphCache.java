package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Eager (uncaptured) collective launches of one rank, made as one-kernel CUDA graphs: captured the
 * first time a launch (kernel, grid, parameter values) is seen, replayed with {@code cuGraphLaunch}
 * every time after. Why: on the 2- and 4-GPU H200 machines, a plain {@code cuLaunchKernelEx} of a
 * kernel that waits for its peers runs in stretches at 25–50 µs of host CPU time per launch (cause
 * not found), while launching the same kernel as a one-node graph costs 2–3.5 µs
 * (bench/results/2026-11-22-gpu-eager-probe-2xh200.md, "1-op graph" lines). A training loop
 * all-reduces the same buffers with the same sizes every step, so after the first step every launch
 * is a replay.
 *
 * <p>Keyed by the parameter bytes, a cached graph does exactly what a fresh launch with the same
 * values would do (the kernels read everything else from device memory), so a hit is always
 * correct, even for memory freed and reallocated at the same address. Least recently used graphs
 * beyond {@link #CAPACITY} are destroyed (a graph still running is freed by the driver when it
 * completes). Not used while the stream is being captured by the user ({@link CudaCommunicator#capture}):
 * the launch then goes into the user's graph. Off with {@code -Dsymmem4j.cuda.eagerGraphs=false}.
 * Confined to the rank's thread, as the stream is.
 */
final class EagerGraphCache {

    static final int CAPACITY = 64;
    static final boolean ENABLED = Boolean.parseBoolean(System.getProperty("symmem4j.cuda.eagerGraphs", "true"));

    /** A launch: kernel name, grid, block and the parameter bytes; mutable so that lookups allocate nothing. */
    private static final class Key {
        String kernel;
        int grid;
        int block;
        byte[] bytes;
        int length;
        int hash;

        Key(int capacity) {
            bytes = new byte[capacity];
        }

        Key copy() {
            Key k = new Key(0);
            k.kernel = kernel;
            k.grid = grid;
            k.block = block;
            k.bytes = Arrays.copyOf(bytes, length);
            k.length = length;
            k.hash = hash;
            return k;
        }

        @Override
        public int hashCode() {
            return hash;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Key k && k.grid == grid && k.block == block && k.length == length && k.kernel.equals(kernel)
                    && Arrays.equals(k.bytes, 0, k.length, bytes, 0, length);
        }
    }

    private final CudaDriver driver;
    private final CudaRank rank;
    private final Key probe = new Key(1024);
    /** Launches that had to be captured (first sight, or evicted since). */
    private long captures;
    private final LinkedHashMap<Key, MemorySegment> graphs = new LinkedHashMap<>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Key, MemorySegment> eldest) {
            if (size() > CAPACITY) {
                driver.destroyGraph(eldest.getValue());
                return true;
            }
            return false;
        }
    };

    EagerGraphCache(CudaDriver driver, CudaRank rank) {
        this.driver = driver;
        this.rank = rank;
    }

    /** Launches {@code kernel} with {@code params} (pointers to {@code slots}, in order) through a cached graph. */
    void launch(String kernel, int grid, int block, MemorySegment params, MemorySegment[] slots) {
        Key key = describe(kernel, grid, block, slots);
        MemorySegment exec = graphs.get(key);
        if (exec == null) {
            driver.beginCapture(rank.stream);
            try {
                rank.launch(driver, kernel, grid, block, params);
            } catch (RuntimeException e) {
                try {
                    driver.destroyGraph(driver.endCaptureAndInstantiate(rank.stream));
                } catch (RuntimeException ignored) {
                    // the capture was already invalidated by the failed launch
                }
                throw e;
            }
            exec = driver.endCaptureAndInstantiate(rank.stream);
            graphs.put(key.copy(), exec);
            captures++;
        }
        driver.launchGraph(exec, rank.stream);
    }

    /** Number of launches captured so far (tests: a repeated launch must not add one). */
    long captures() {
        return captures;
    }

    private Key describe(String kernel, int grid, int block, MemorySegment[] slots) {
        Key k = probe;
        int n = 0;
        for (MemorySegment s : slots) {
            n += (int) s.byteSize();
        }
        if (n > k.bytes.length) {
            k.bytes = new byte[n];
        }
        int at = 0;
        for (MemorySegment s : slots) {
            MemorySegment.copy(s, ValueLayout.JAVA_BYTE, 0, k.bytes, at, (int) s.byteSize());
            at += (int) s.byteSize();
        }
        k.kernel = kernel;
        k.grid = grid;
        k.block = block;
        k.length = n;
        int h = kernel.hashCode() * 31 + grid * 17 + block;
        for (int i = 0; i < n; i++) {
            h = h * 31 + k.bytes[i];
        }
        k.hash = h;
        return k;
    }
}
