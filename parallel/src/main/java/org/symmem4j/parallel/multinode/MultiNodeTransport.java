package org.symmem4j.parallel.multinode;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.Objects;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.CommunicatorOptions;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.Transport;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.TransportCapabilities.Capability;
import org.symmem4j.parallel.mpi.MpiComm;

/**
 * The transport of a process group that spans machines: join the group on it and the code above the
 * runtime (the DL4J trainers included) runs unchanged.
 *
 * <pre>{@code
 * // every process, started by mpirun (or by symmem4j-run --nnodes with Open MPI's environment):
 * try (MpiComm world = Mpi.world();
 *      ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults(), MultiNodeTransport.over(world))) {
 *     SymmemParallelWrapper.builder(model).group(group).build().fit(data);
 * }
 * }</pre>
 *
 * For a group whose ranks sit on one machine it is the group's host transport ({@code /dev/shm}). For a
 * group that spans machines, {@link #communicator} gives the {@link HierarchicalCommunicator} (symmetric
 * memory inside each machine, MPI between) and {@link #allocate} memory of this rank's machine
 * ({@link NodeLocalSymmetricMemory}: its own buffer, and its machine's peers mapped; the collectives use
 * this rank's buffer). A sub-group that spans machines (a data-parallel dimension across machines beside a
 * tensor-parallel one inside each) is served the same way over an MPI communicator of its own processes.
 */
public final class MultiNodeTransport implements Transport {

    /** This transport's name. */
    public static final String NAME = "multinode";

    private final MpiComm world;
    /** The world ranks of the group this transport serves, in group order; null for the world itself. */
    private final int[] worldRanks;

    private MultiNodeTransport(MpiComm world, int[] worldRanks) {
        this.world = world;
        this.worldRanks = worldRanks;
    }

    /**
     * The transport for a job whose processes are {@code world}'s (the same processes in the same order as
     * the group joined on it: {@code ProcessGroup.fromEnvironment()} under {@code mpirun} reads Open MPI's rank).
     *
     * @param world the job's MPI communicator (e.g. {@code Mpi.world()}); not closed by this transport
     * @return the transport
     */
    public static MultiNodeTransport over(MpiComm world) {
        return new MultiNodeTransport(Objects.requireNonNull(world, "world"), null);
    }

    @Override
    public String name() {
        return NAME;
    }

    /**
     * Collective: symmetric memory of {@code bytes} per rank — on one machine the host transport's; across
     * machines each machine's own, as {@link NodeLocalSymmetricMemory}.
     */
    @Override
    public SymmetricMemory allocate(Group group, long bytes) {
        NodeTopology topology = NodeTopology.of(group);
        if (topology.nodes() == 1) {
            return group.hostTransport().allocate(group, bytes);
        }
        return NodeLocalSymmetricMemory.allocate(group, topology, bytes);
    }

    /** Refused across machines (a buffer of the caller's cannot be mapped by another machine); on one machine the host transport's. */
    @Override
    public SymmetricMemory register(Group group, MemorySegment buffer) {
        NodeTopology topology = NodeTopology.of(group);
        if (topology.nodes() == 1) {
            return group.hostTransport().register(group, buffer);
        }
        throw capabilities(topology).refusal(Capability.REGISTER);
    }

    /**
     * Collective at the group's first use (its machine layout, {@link NodeTopology#of}): on one machine the host
     * transport's answers (sub-groups served by this transport); across machines each machine's memory, no
     * register and no peer access to other machines' ranks.
     */
    @Override
    public TransportCapabilities capabilities(Group group) {
        NodeTopology topology = NodeTopology.of(group);
        if (topology.nodes() == 1) {
            TransportCapabilities host = group.hostTransport().capabilities(group);
            TransportCapabilities.Builder b = TransportCapabilities.of(NAME);
            host.entries().forEach(b::set);
            return b.yes(Capability.SUB_GROUPS, "").build();
        }
        return capabilities(topology);
    }

    /**
     * The answers for a group across machines, no group needed (the documentation's table is printed from it).
     *
     * @param topology the group's machines, {@code nodes() > 1}
     * @return what {@link #capabilities(Group)} answers for a group of that layout
     */
    public static TransportCapabilities capabilities(NodeTopology topology) {
        return TransportCapabilities.of(NAME)
                .yes(Capability.ALLOCATE, "each machine's own memory, its ranks mapped to each other")
                .no(Capability.REGISTER, "register across " + topology.nodes() + " machines: another machine cannot"
                        + " map this rank's buffer; use SymmetricMemory.allocate (each machine's memory) or the"
                        + " collectives on native segments")
                .no(Capability.PEER_ACCESS, "peer towards a rank of another machine (the group spans "
                        + topology.nodes() + " machines, " + topology.ranksPerNode() + " ranks each): "
                        + NodeLocalSymmetricMemory.STAYS_INSIDE_A_MACHINE)
                .yes(Capability.IN_PLACE_REDUCE_SCATTER, "each rank's own buffer, MPI between machines")
                .yes(Capability.IN_PLACE_ALL_GATHER, "each rank's own buffer, MPI between machines")
                .yes(Capability.SUB_GROUPS, "an MPI communicator of their own across machines")
                .no(Capability.DEVICE_MEMORY, "transport " + NAME + " holds host memory; for GPUs across machines"
                        + " create the group on the cuda transport (NCCL between machines)")
                .yes(Capability.CROSS_PROCESS, "")
                .no(Capability.DECOMMIT, "decommit across " + topology.nodes() + " machines: the memory of a group"
                        + " across machines does not give pages back yet; on one machine use the " + HOST_SHM
                        + " transport (a ProcessGroup)")
                .build();
    }

    /**
     * Collective: on one machine the host transport's communicator; for the whole job across machines a
     * {@link HierarchicalCommunicator} over {@code world}.
     *
     * A sub-group that spans machines gets a {@link HierarchicalCommunicator} over an MPI communicator of its own
     * processes ({@link MpiComm#subset}).
     */
    @Override
    public Communicator communicator(Group group, CommunicatorOptions options) {
        NodeTopology topology = NodeTopology.of(group);
        if (topology.nodes() == 1) {
            return group.hostTransport().communicator(group, options);
        }
        if (worldRanks == null) {
            return HierarchicalCommunicator.create(group, world);
        }
        // a sub-group spanning machines (a data-parallel dimension across machines, say): an MPI communicator of its
        // processes alone, in group order, made by them alone while the rest of the job may be elsewhere
        return HierarchicalCommunicator.create(group, world.subset(worldRanks, Math.floorMod(Arrays.hashCode(worldRanks),
                1 << 15)), true);
    }

    /**
     * Sub-groups keep this transport: inside one machine it serves them with the host transport, across machines with a
     * hierarchical communicator of their own.
     */
    @Override
    public Transport forSubGroup(int[] parentRanks) {
        int[] mine = new int[parentRanks.length];
        for (int i = 0; i < parentRanks.length; i++) {
            mine[i] = worldRanks == null ? parentRanks[i] : worldRanks[parentRanks[i]];
        }
        return new MultiNodeTransport(world, mine);
    }
}
