package org.symmem4j.dl4j;

import java.lang.foreign.MemorySegment;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.dl4j.train.RankRuntime;
import org.symmem4j.parallel.ReduceOp;

/**
 * Hybrid sharding (FSDP2's HSDP) for one stage-3 worker: the N workers laid out as a {@code replicate × shard}
 * {@link DeviceMesh} of D = N / S rows of S workers. {@link FullySharded} shards the model inside the worker's
 * {@link #shardGroup() shard group} (its row: S neighbouring ranks, e.g. one machine), exactly as stage 3 does over
 * all N, and the D rows are replicas of each other: after a unit's reduce-scatter inside the row, the worker's block
 * is summed over the rows ({@link #sumAcrossReplicas}) by the workers that own the same block (its column).
 * <pre>
 *   N = 4, S = 2 (D = 2):       shard=0  shard=1
 *                   replicate=0 [  0        1  ]  &lt;- shard group: a unit's gather and reduce-scatter
 *                   replicate=1 [  2        3  ]
 *                                  ^ replica group of ranks 0 and 2: the all-reduce of block 0
 * </pre>
 *
 * <p>Reduction order: each element of block {@code s} is summed inside every row in rank order
 * ({@code g(d,0) + g(d,1) + ... + g(d,S-1)}), then the D row sums are added in row order. That is another
 * association than plain data parallelism's sum over all N in rank order, so HSDP is not bitwise equal to it (nor
 * to stage 3 over all N) when D &gt; 1; it is deterministic (the same bits in every run) and the replicas of a block
 * are bitwise equal, so the model stays one model. With D = 1 (S = N) it is stage 3 itself.
 *
 * <p>Everything else a stage-3 step reduces — the loss, BatchNorm's running statistics, the non-finite verdict
 * over the rows' identical shards — is unchanged: the loss and the state updates over the whole group, the verdicts
 * and gradient norms over the shard group (each element once; the replicas hold the same bits, so every row agrees).
 *
 * <p>Collective to open (one {@link Group#split} per dimension, as every mesh); closed by the worker after its
 * {@link FullySharded}, whose memory belongs to the shard group.
 */
final class HybridSharding implements AutoCloseable {

    /** The mesh dimension whose groups hold replicas of the same blocks. */
    static final String REPLICATE = "replicate";
    /** The mesh dimension inside which the model is sharded. */
    static final String SHARD = "shard";

    private final DeviceMesh mesh;
    private final Communicator shard;
    private final Communicator replicas;
    private final AlgorithmPolicy policy;

    private HybridSharding(DeviceMesh mesh, Communicator shard, Communicator replicas, AlgorithmPolicy policy) {
        this.mesh = mesh;
        this.shard = shard;
        this.replicas = replicas;
        this.policy = policy;
    }

    /**
     * Throws, naming what and the fix, unless {@code shardGroupSize} workers per shard group fit {@code workers}
     * workers: a divisor of it, at least 2 (a group of one shards nothing). {@code shardGroupSize == workers} is
     * stage 3 over all workers.
     *
     * @param workers        the workers (N)
     * @param shardGroupSize the workers per shard group (S)
     */
    static void check(int workers, int shardGroupSize) {
        if (shardGroupSize == 1) {
            throw new IllegalArgumentException("shardGroupSize=1 with sharding(PARAMETERS): a shard group of one worker"
                    + " shards nothing, every worker would hold the whole model (plain data parallelism); expected 2 .. "
                    + workers + " (fix: shardGroupSize(s) with s a divisor of workers=" + workers + " and s >= 2, or drop"
                    + " sharding(...) for plain data parallelism)");
        }
        if (shardGroupSize < 1 || shardGroupSize > workers || workers % shardGroupSize != 0) {
            throw new IllegalArgumentException("shardGroupSize=" + shardGroupSize + " with workers=" + workers + ": expected"
                    + " a divisor of the worker count (the workers form workers/shardGroupSize replicas of shardGroupSize"
                    + " workers each; fix: shardGroupSize(s) with s in " + divisors(workers) + ", or workers(n) with n a"
                    + " multiple of " + shardGroupSize + ")");
        }
    }

    private static String divisors(int n) {
        StringBuilder b = new StringBuilder("{");
        for (int d = 2; d <= n; d++) {
            if (n % d == 0) {
                b.append(b.length() == 1 ? "" : ", ").append(d);
            }
        }
        return b.append('}').toString();
    }

    /**
     * Collective over {@code world}: this rank's place in the {@code replicate × shard} mesh and a communicator for
     * each of its two groups.
     *
     * @param world          every worker, rank order (threads' in-JVM world, or group mode's group)
     * @param shardGroupSize S, checked by {@link #check}; S &lt; N
     * @param policy         chooses the replicas' all-reduce algorithm, as for plain data parallelism's buckets
     */
    static HybridSharding open(Group world, int shardGroupSize, AlgorithmPolicy policy) {
        check(world.worldSize(), shardGroupSize);
        DeviceMesh mesh = DeviceMesh.of(world, REPLICATE, world.worldSize() / shardGroupSize, SHARD, shardGroupSize);
        Communicator shard = null;
        try {
            shard = Communicator.create(mesh.group(SHARD));
            Communicator replicas = Communicator.create(mesh.group(REPLICATE));
            return new HybridSharding(mesh, shard, replicas, policy);
        } catch (RuntimeException | Error e) {
            RankRuntime.closeQuietly(shard);
            RankRuntime.closeQuietly(mesh);
            throw e;
        }
    }

    /** The S workers this worker shards the model with (its row of the mesh). */
    Group shardGroup() {
        return mesh.group(SHARD);
    }

    /** The shard group's communicator: the units' gathers and reduce-scatters, the shard's verdicts and norms. */
    Communicator shard() {
        return shard;
    }

    /** This worker's coordinate along the replica dimension (its row). */
    int replica() {
        return mesh.coordinate(REPLICATE);
    }

    /** The number of replicas (D = N / S). */
    int replicaCount() {
        return mesh.size(REPLICATE);
    }

    /**
     * Collective over this worker's replica group (the workers that own the same blocks): {@code count} elements at
     * the start of {@code block}, each already summed over its shard group, summed over the replicas in row order.
     * Every replica gets the same bits.
     */
    void sumAcrossReplicas(MemorySegment block, long count, DType dtype) {
        if (count == 0) {
            return; // every replica of this block has it empty (the same partition in every row)
        }
        replicas.allReduce(block, count, dtype, ReduceOp.SUM, policy.choose(replicas, count, dtype, ReduceOp.SUM));
    }

    /** Closes the communicators and the mesh's sub-groups (not the world). Close the shard group's memories first. */
    @Override
    public void close() {
        RankRuntime.closeQuietly(replicas);
        RankRuntime.closeQuietly(shard);
        mesh.close();
    }

    @Override
    public String toString() {
        return "HybridSharding[" + mesh + "]";
    }
}
