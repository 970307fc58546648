package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;

/** An instantiated CUDA graph of collectives captured on one rank's stream; replay it on that stream. */
public final class CudaGraph implements org.symmem4j.parallel.DeviceGraph {

    private final CudaDriver driver;
    private final CudaRank rank;
    private final MemorySegment exec;

    CudaGraph(CudaDriver driver, CudaRank rank, MemorySegment exec) {
        this.driver = driver;
        this.rank = rank;
        this.exec = exec;
    }

    /** Enqueues one replay on the rank's stream (every rank replays its graph the same number of times). */
    @Override
    public void replay() {
        driver.setCurrent(rank.context);
        driver.launchGraph(exec, rank.stream);
    }

    @Override
    public void close() {
        driver.setCurrent(rank.context);
        driver.destroyGraph(exec);
    }
}
