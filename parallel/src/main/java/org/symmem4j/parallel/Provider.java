package org.symmem4j.parallel;

/**
 * Who moves a collective's bytes: the second axis of a collective's route, next to the {@link Algorithm} that
 * names it. An algorithm runs on one provider ({@link Algorithm#provider()}): {@link Algorithm#ONE_SHOT},
 * {@link Algorithm#TWO_SHOT} and {@link Algorithm#RING} are this library's own kernels and loops over symmetric
 * memory ({@link #SYMMEM}); {@link Algorithm#NCCL}, {@link Algorithm#NCCL_SYMMETRIC}, {@link Algorithm#MPI} and
 * {@link Algorithm#NVSHMEM} hand the whole collective to a library, which picks its own algorithm inside (NCCL's
 * ring or tree, MPI's); {@link Algorithm#HIERARCHICAL} is symmetric memory inside each machine with the group's
 * inter-machine link (MPI or NCCL, {@code multinode.InterMachineLink#provider()}) between machines. On GPUs the
 * kernels have a third, internal axis, their protocol ({@code cuda.Protocol}), as NCCL's algorithms do.
 */
public enum Provider {
    /** This library's kernels (GPU) or loops (host) reading and writing peers' symmetric memory directly. */
    SYMMEM,
    /**
     * The NCCL library (GPU transports; plain buffers, or a symmetric window as {@link Algorithm#NCCL_SYMMETRIC}: the same
     * library on another route, which the policy picks per message size against plain NCCL); set up by
     * {@code cuda.NcclProvider}.
     */
    NCCL,
    /** An MPI library (groups that span machines, host memory). */
    MPI,
    /** NVSHMEM's own on-stream collectives (groups on the NVSHMEM transport). */
    NVSHMEM;

    /**
     * The algorithm that hands an all-reduce to this library as a whole: the route that names the library.
     *
     * @return {@link Algorithm#NCCL}, {@link Algorithm#MPI} or {@link Algorithm#NVSHMEM}
     * @throws IllegalArgumentException for {@link #SYMMEM}, which has several algorithms of its own (name one)
     */
    public Algorithm library() {
        return switch (this) {
            case NCCL -> Algorithm.NCCL;
            case MPI -> Algorithm.MPI;
            case NVSHMEM -> Algorithm.NVSHMEM;
            case SYMMEM -> throw new IllegalArgumentException("provider=SYMMEM has several algorithms: expected one of"
                    + " ONE_SHOT, TWO_SHOT, RING, HIERARCHICAL (fix: name the algorithm, e.g. Algorithm.RING)");
        };
    }
}
