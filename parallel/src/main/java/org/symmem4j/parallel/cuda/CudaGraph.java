package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicBoolean;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * An instantiated CUDA graph of collectives captured on one rank's stream; replay it on that stream.
 * Destroyed by {@link #close} or, at the latest, when its rank is released ({@link CudaRank#close}).
 */
public final class CudaGraph implements org.symmem4j.parallel.DeviceGraph {

    private final CudaDriver driver;
    private final CudaRank rank;
    private final MemorySegment exec;
    private final AtomicBoolean destroyed = new AtomicBoolean();
    /** The enqueue order of the fused tensor-parallel calls captured in this graph, or null when it has none. */
    private final EnqueueOrder.Seat order;

    CudaGraph(CudaDriver driver, CudaRank rank, MemorySegment exec, EnqueueOrder.Seat order) {
        this.driver = driver;
        this.rank = rank;
        this.exec = exec;
        this.order = order;
        rank.track(this);
    }

    /** Enqueues one replay on the rank's stream (every rank replays its graph the same number of times). */
    @Override
    public void replay() {
        if (destroyed.get()) {
            throw new IllegalStateException("replay of a closed graph (fix: capture it again)");
        }
        rank.makeCurrent("replay a graph");
        if (order == null) {
            driver.launchGraph(exec, rank.stream);
            return;
        }
        // a replay of fused tensor-parallel calls is one unit of their enqueue order, as an eager call is
        order.enter();
        driver.launchGraph(exec, rank.stream);
        order.exit();
    }

    @Override
    public void close() {
        if (destroyed.get()) {
            return;
        }
        rank.untrack(this);
        destroy();
    }

    /** Destroys the executable graph in the rank's context (made current here); once. */
    void destroy() {
        if (destroyed.compareAndSet(false, true)) {
            driver.setCurrent(rank.context);
            driver.destroyGraph(exec);
        }
    }
}
