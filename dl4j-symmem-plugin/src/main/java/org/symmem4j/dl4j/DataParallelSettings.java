package org.symmem4j.dl4j;

import java.time.Duration;
import org.deeplearning4j.nn.conf.WorkspaceMode;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.parallel.Group;

/**
 * The data-parallel trainer's settings, checked by its builder ({@link SymmemParallelWrapper.Builder}) and shared
 * with its workers. {@code accumulation}: micro-batches per worker per step; {@code minBucketBytes}: see
 * {@link org.symmem4j.gradsync.GradientBuckets#splitAtBoundaries}; {@code prefetchBuffer}: batches read ahead on a
 * background thread (0: on the caller's thread); {@code workspaceMode}: the replicas' training workspace mode, null
 * for the model's own; {@code timelineSteps}: steps a {@link DataParallelTimeline} keeps, 0 for no timeline (nothing
 * stamped); {@code onWorkerFailure}: fail or shrink ({@link WorkerFailure}); {@code minWorkers}: the fewest workers a
 * shrink may leave; {@code shardGroupSize}: with stage 3, the workers per shard group of hybrid sharding
 * ({@link HybridSharding}), 0 to shard over every worker; {@code syncBatchNorm}: BatchNormalization layers normalize
 * with the statistics of every worker's batch ({@link SyncBatchNorm}).
 */
record DataParallelSettings(int workers, long bucketBytes, AlgorithmPolicy policy, NonFiniteGradients nonFiniteGradients,
                            Duration timeout, int ompThreadsPerWorker, ZeroStage sharding, boolean overlap,
                            int accumulation, GradientTransfer gradientTransfer, long minBucketBytes, int prefetchBuffer,
                            boolean reportScoreAfterAveraging, WorkspaceMode workspaceMode, int timelineSteps,
                            Group group, WorkerFailure onWorkerFailure, int minWorkers, int shardGroupSize,
                            boolean syncBatchNorm) {

    /** {@return whether a worker's failure shrinks the group instead of failing the fit} */
    boolean shrinks() {
        return onWorkerFailure == WorkerFailure.SHRINK;
    }

    /** The same settings on {@code survivors}, the group a shrink formed (group mode): one worker per rank. */
    DataParallelSettings withGroup(Group survivors) {
        return new DataParallelSettings(survivors.worldSize(), bucketBytes, policy, nonFiniteGradients, timeout,
                ompThreadsPerWorker, sharding, overlap, accumulation, gradientTransfer, minBucketBytes, prefetchBuffer,
                reportScoreAfterAveraging, workspaceMode, timelineSteps, survivors, onWorkerFailure, minWorkers,
                shardGroupSize, syncBatchNorm);
    }

    /** The same settings for {@code survivors} workers (thread mode's shrink), each with {@code ndThreads} ND4J threads. */
    DataParallelSettings withWorkers(int survivors, int ndThreads) {
        return new DataParallelSettings(survivors, bucketBytes, policy, nonFiniteGradients, timeout, ndThreads, sharding,
                overlap, accumulation, gradientTransfer, minBucketBytes, prefetchBuffer, reportScoreAfterAveraging,
                workspaceMode, timelineSteps, group, onWorkerFailure, minWorkers, shardGroupSize, syncBatchNorm);
    }

    /** Whether stage 3 shards inside groups of {@link #shardGroupSize} workers and replicates across them (HSDP). */
    boolean hybrid() {
        return shardGroupSize > 0 && shardGroupSize < workers;
    }

    /** The ranks this process trains itself: every worker's in thread mode, the group's own rank in group mode. */
    int firstLocalRank() {
        return group == null ? 0 : group.rank();
    }

    int localWorkers() {
        return group == null ? workers : 1;
    }

    /**
     * GPU mode: group mode on a transport whose memory is a GPU's, so the rank's gradient view is ND4J's device
     * memory, summed and divided on the device ({@link GpuGradientAveraging}).
     */
    boolean gpuMode() {
        return gpuMode(group);
    }

    static boolean gpuMode(Group group) {
        return group != null && group.transport().deviceMemory();
    }
}
