package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.util.LinkedHashMap;
import java.util.Map;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * Eager (uncaptured) all-reduces of one rank, made as one-kernel CUDA graphs: the first call with
 * given arguments (communicator, symmetric memory, offset, count, dtype, op, algorithm) captures its
 * launch into a graph; every later call with the same arguments only launches that graph. Why: the
 * launch of a kernel from Java takes about 30 slot writes through {@code MemorySegment} accessors,
 * a few branches and an FFM downcall; while C2 has not compiled that path (after start-up, and again
 * after each deoptimization, for the ~130 ms a C2 compile of it takes) a call cost 25–50 µs of host
 * time on the H200 machines, against 2–3 µs for the compiled path
 * (bench/results/2026-11-22-gpu-eager-probe-2xh200.md). A cache hit is a map lookup and
 * {@code cuGraphLaunch}; a training loop all-reduces the same buffers with the same sizes every step,
 * so after the first step every call is a hit.
 *
 * <p>The key holds the memory's id, which no later allocation reuses, and the launch parameters are
 * a function of the key (the communicator's scratch and grid choices are fixed), so a hit launches
 * exactly what a fresh launch would. Least recently used graphs beyond {@link #CAPACITY} are
 * destroyed (a graph still running is freed by the driver when it completes). Not used while the
 * stream is being captured by the user ({@link CudaCommunicator#capture}): the launch then goes into
 * the user's graph. Off with {@code -Dsymmem4j.cuda.eager.graphs=false} ({@link Configuration#CUDA_EAGER_GRAPHS}).
 * Confined to the rank's thread, as the stream is.
 */
final class EagerGraphCache {

    static final int CAPACITY = 64;
    static final boolean ENABLED = Configuration.CUDA_EAGER_GRAPHS.get();

    /** The arguments of one call; mutable so that a lookup allocates nothing. */
    private static final class Key {
        long communicator;
        long memoryId;
        long offset;
        long count;
        int dtype;
        int op;
        int algorithm;

        Key set(long communicator, long memoryId, long offset, long count, int dtype, int op, int algorithm) {
            this.communicator = communicator;
            this.memoryId = memoryId;
            this.offset = offset;
            this.count = count;
            this.dtype = dtype;
            this.op = op;
            this.algorithm = algorithm;
            return this;
        }

        Key copy() {
            return new Key().set(communicator, memoryId, offset, count, dtype, op, algorithm);
        }

        @Override
        public int hashCode() {
            long h = communicator * 31 + memoryId;
            h = h * 31 + offset;
            h = h * 31 + count;
            h = h * 31 + ((long) dtype << 16 | (long) op << 8 | algorithm);
            return Long.hashCode(h);
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Key k && k.communicator == communicator && k.memoryId == memoryId && k.offset == offset
                    && k.count == count && k.dtype == dtype && k.op == op && k.algorithm == algorithm;
        }
    }

    private final CudaDriver driver;
    private final CudaRank rank;
    private final Key probe = new Key();
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

    /** The graph of a call with these arguments, or null; a null answer is followed by {@link #capture}. */
    MemorySegment find(long communicator, long memoryId, long offset, long count, int dtype, int op, int algorithm) {
        return graphs.get(probe.set(communicator, memoryId, offset, count, dtype, op, algorithm));
    }

    /** Captures what {@code launch} enqueues on the rank's stream into the graph of the call last passed to {@link #find}. */
    MemorySegment capture(Runnable launch) {
        Key key = probe.copy();
        MemorySegment exec = rank.captureGraph(driver, launch);
        graphs.put(key, exec);
        captures++;
        return exec;
    }

    /**
     * Destroys every cached graph (the rank is closing; its context is current). A graph still
     * running is freed by the driver when it completes.
     */
    void close() {
        try {
            for (MemorySegment exec : graphs.values()) {
                driver.destroyGraph(exec);
            }
        } finally {
            graphs.clear();
        }
    }

    /** Graphs held now (tests: 0 after {@link #close}). */
    int size() {
        return graphs.size();
    }

    /** Number of launches captured so far (tests: a repeated call must not add one). */
    long captures() {
        return captures;
    }
}
