package org.symmem4j.dl4j;

/**
 * What one data-parallel worker's replica holds, from its actual arrays
 * ({@link SymmemParallelWrapper#workerMemory()}).
 *
 * @param worker            worker (rank) index
 * @param shardStart        first element of the flat parameter vector whose updater state this worker keeps
 * @param shardEnd          one past the last (without sharding: the whole vector); with stage 3 the worker owns
 *                          its block of every layer between them, not all of it
 * @param paramBytes        the replica's flat parameter view; with stage 3 ({@link ZeroStage#PARAMETERS}) the
 *                          bytes of its sparse memory that are resident (own blocks, and pages a step left
 *                          committed), measured with {@code mincore}
 * @param gradientBytes     the replica's flat gradient view (DL4J allocates it whole in stages 1 and 2); with
 *                          stage 3 its resident bytes, as for the parameters
 * @param updaterStateBytes the updater state this worker keeps: DL4J's full state view without
 *                          sharding, the worker's shard of it with sharding
 */
public record WorkerMemory(int worker, long shardStart, long shardEnd, long paramBytes, long gradientBytes,
                           long updaterStateBytes) {
}
