package org.symmem4j.dl4j;

/**
 * What one data-parallel worker's replica holds, from its actual arrays
 * ({@link SymmemParallelWrapper#workerMemory()}).
 *
 * @param worker            worker (rank) index
 * @param shardStart        first element of the flat parameter vector whose updater state this worker keeps
 * @param shardEnd          one past the last (without sharding: the whole vector)
 * @param paramBytes        the replica's flat parameter view
 * @param gradientBytes     the replica's flat gradient view (DL4J allocates it whole, sharded or not)
 * @param updaterStateBytes the updater state this worker keeps: DL4J's full state view without
 *                          sharding, the worker's shard of it with sharding
 */
public record WorkerMemory(int worker, long shardStart, long shardEnd, long paramBytes, long gradientBytes,
                           long updaterStateBytes) {
}
