package org.symmem4j.parallel;

/**
 * All-reduce algorithms. On symmetric memory they differ in how many bytes each rank moves and how
 * many synchronizations they need:
 * <ul>
 *   <li>{@link #ONE_SHOT}: each rank reads every peer's whole buffer and reduces it itself.
 *       One data barrier; reads (N-1)·S per rank. Best for small messages.</li>
 *   <li>{@link #TWO_SHOT}: reduce-scatter (rank r reduces chunk r from every peer), then all-gather
 *       (rank r copies every peer's reduced chunk). Two data barriers; reads about 2·S per rank,
 *       independent of N. Best for large messages.</li>
 *   <li>{@link #RING}: reduce-scatter and all-gather as 2(N-1) steps where each rank only reads its
 *       left neighbour, synchronized neighbour to neighbour. Partial sums travel in the
 *       accumulation type (FLOAT32 for BFLOAT16).</li>
 *   <li>{@link #NCCL}: the NCCL library (GPU transports only).</li>
 *   <li>{@link #NCCL_SYMMETRIC}: NCCL on an NCCL symmetric window (a buffer from {@code ncclMemAlloc}
 *       registered with {@code NCCL_WIN_COLL_SYMMETRIC}, NCCL 2.27+), whose kernels reach peers
 *       directly: the communicator copies the message into its own window, reduces there and copies
 *       it back. Faster than plain NCCL for small messages (1 to 16 KiB on 2 x H200: 3.6 against 6.0 us).
 *       GPU transports with one GPU per rank and NCCL windows only.</li>
 *   <li>{@link #MPI}: one MPI all-reduce over every rank (groups that span machines, on
 *       {@code org.symmem4j.parallel.multinode.HierarchicalCommunicator}): the flat baseline.</li>
 *   <li>{@link #HIERARCHICAL}: reduce-scatter inside each machine on symmetric memory, reduce-scatter and
 *       all-gather of each shard between machines over MPI or NCCL, all-gather inside each machine (Horovod's and
 *       NCCL's scheme); deterministic, and bitwise identical on every rank.</li>
 * </ul>
 * Each algorithm runs on one {@link Provider} ({@link #provider()}), the library that moves the bytes: the route of
 * a collective is read along both axes, e.g. {@code algorithm.provider() == Provider.NCCL} for NCCL on plain
 * buffers or on a symmetric window, and {@link Provider#library()} names the algorithm that hands a collective to a
 * library. The constants and their order are persisted (calibrated threshold tables, bench command lines, metric
 * tags, the op descriptor ranks compare), so they stay as they are; {@link #parse} reads every spelling.
 * <p>
 * ONE_SHOT and TWO_SHOT add peers in rank order 0..N-1 and give bitwise-identical results to each
 * other. RING adds chunk k's contributions in ring order k, k+1, …, k-1: deterministic and identical
 * on every rank, but not bitwise equal to the other two for SUM/AVG with N &gt; 2.
 */
public enum Algorithm {
    /** Every rank reads every peer's whole buffer and reduces it itself: one barrier, for small messages. */
    ONE_SHOT(Provider.SYMMEM),
    /** Reduce-scatter then all-gather over the peers' buffers: two barriers, for large messages. */
    TWO_SHOT(Provider.SYMMEM),
    /** 2(N-1) neighbour-to-neighbour steps, each rank reading only its left neighbour. */
    RING(Provider.SYMMEM),
    /** The NCCL library; GPU transports only ({@link Communicator#supports} says where it runs). */
    NCCL(Provider.NCCL),
    /**
     * NCCL on the communicator's NCCL symmetric window, staged through it; GPU transports whose NCCL
     * has symmetric windows only ({@link Communicator#supports} says where it runs).
     */
    NCCL_SYMMETRIC(Provider.NCCL),
    /** One MPI all-reduce over every rank: the flat algorithm of groups that span machines. */
    MPI(Provider.MPI),
    /** Symmetric memory inside each machine, MPI or NCCL between machines (multi-node groups only). */
    HIERARCHICAL(Provider.SYMMEM),
    /**
     * NVSHMEM's own on-stream reduction over every PE (SUM, MAX, MIN of FLOAT32, FLOAT64, BFLOAT16); groups
     * on the NVSHMEM transport only ({@link Communicator#supports} says where it runs). Never chosen by the
     * policy: named by callers that want NVSHMEM's collectives.
     */
    NVSHMEM(Provider.NVSHMEM);

    private final Provider provider;

    Algorithm(Provider provider) {
        this.provider = provider;
    }

    /**
     * Who moves the bytes: {@link Provider#SYMMEM} for this library's kernels and loops (and for
     * {@link #HIERARCHICAL}, whose traffic between machines is the group's link's, named by
     * {@code multinode.InterMachineLink#provider()}), else the library the collective is handed to.
     *
     * @return the provider
     */
    public Provider provider() {
        return provider;
    }

    /**
     * Whether the collective is handed to a library as a whole (NCCL, NCCL on a symmetric window, MPI, NVSHMEM),
     * which picks its own algorithm inside; false for this library's algorithms.
     *
     * @return {@code provider() != Provider.SYMMEM}
     */
    public boolean handsToLibrary() {
        return provider != Provider.SYMMEM;
    }

    /**
     * Reads an algorithm as written in threshold tables, properties and command lines: the constant's name in any
     * case, with {@code -} for {@code _} (e.g. {@code two-shot}, {@code NCCL_SYMMETRIC}, {@code nccl-symmetric}).
     *
     * @param name the spelling
     * @return the algorithm
     * @throws IllegalArgumentException naming the value and the accepted ones when it is none of them
     */
    public static Algorithm parse(String name) {
        String key = name == null ? "" : name.trim().replace('-', '_');
        for (Algorithm a : values()) {
            if (a.name().equalsIgnoreCase(key)) {
                return a;
            }
        }
        throw new IllegalArgumentException("algorithm=" + name + ": expected one of"
                + " " + java.util.Arrays.toString(values())
                    + " (fix: use one of those names, e.g. RING)");
    }
}
