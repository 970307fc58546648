package org.symmem4j.parallel.multinode;

import java.lang.foreign.MemorySegment;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.SignalOp;
import org.symmem4j.parallel.SymmetricMemory;

/**
 * Symmetric memory of a group that spans machines, as far as it can exist: every rank has its buffer of
 * {@link #byteSize()} bytes, and the ranks of its own machine are mapped (the machine's ranks share one
 * host-transport memory); ranks on other machines are not. {@link #local()} is what the collectives of a
 * {@link HierarchicalCommunicator} read and write. A peer operation towards another machine's rank
 * ({@link #peer}, puts, signals) throws naming both machines; {@link #barrier()} meets every rank of the group.
 *
 * <pre>
 *   group ranks      0    1  |  2    3        (2 machines x 2 ranks)
 *   machine memory  [m0] [m1] | [m0] [m1]     one host memory per machine, its ranks mapped to each other
 *   rank 1 sees      0 ✓  1 ✓ | 2 ✗  3 ✗
 * </pre>
 */
final class NodeLocalSymmetricMemory implements SymmetricMemory {

    /** Why a peer on another machine is refused, and the fix (also the multinode capability record's reason). */
    static final String STAYS_INSIDE_A_MACHINE = "symmetric memory stays inside a machine; between machines use the"
            + " communicator's collectives (MPI carries them)";

    private final Group group;
    private final NodeTopology topology;
    private final Group machine;
    private final SymmetricMemory memory;

    private NodeLocalSymmetricMemory(Group group, NodeTopology topology, Group machine, SymmetricMemory memory) {
        this.group = group;
        this.topology = topology;
        this.machine = machine;
        this.memory = memory;
    }

    /** Collective over {@code group}: each machine's ranks allocate one host memory among themselves. */
    static NodeLocalSymmetricMemory allocate(Group group, NodeTopology topology, long bytes) {
        Group machine = group.split(topology.node(), topology.localRank(), "machine-memory");
        try {
            return new NodeLocalSymmetricMemory(group, topology, machine, machine.hostTransport().allocate(machine, bytes));
        } catch (RuntimeException | Error e) {
            machine.close();
            throw e;
        }
    }

    /** The machine-local rank of group rank {@code rank}, or an exception naming both machines when it is elsewhere. */
    private int onThisMachine(int rank, String what) {
        if (rank < 0 || rank >= group.worldSize()) {
            throw new IndexOutOfBoundsException(what + ": rank " + rank + " outside the group's 0.." + (group.worldSize() - 1)
                    + " (fix: pass a rank of the group)");
        }
        int node = rank / topology.ranksPerNode();
        if (node != topology.node()) {
            throw new UnsupportedOperationException(what + " towards rank " + rank + " (machine " + node + ") from rank "
                    + group.rank() + " (machine " + topology.node() + "): " + STAYS_INSIDE_A_MACHINE + " (fix: reach"
                    + " ranks on machine " + topology.node() + " only, or move the data with the communicator)");
        }
        return rank % topology.ranksPerNode();
    }

    @Override
    public Group group() {
        return group;
    }

    @Override
    public long byteSize() {
        return memory.byteSize();
    }

    @Override
    public long id() {
        return memory.id();
    }

    @Override
    public MemorySegment local() {
        return memory.local();
    }

    @Override
    public boolean hostAddressable() {
        return memory.hostAddressable();
    }

    @Override
    public MemorySegment peer(int rank) {
        return memory.peer(onThisMachine(rank, "peer"));
    }

    @Override
    public int signalSlots() {
        return memory.signalSlots();
    }

    /** Collective over the whole group: the machine's barrier, every machine meeting over the group's store, the machine's again. */
    @Override
    public void barrier() {
        memory.barrier();
        group.allGatherBytes("node-local-memory-barrier", new byte[0]);
        memory.barrier();
    }

    @Override
    public void putWithSignal(int peer, MemorySegment src, long dstOffset, int slot, long value, SignalOp op) {
        memory.putWithSignal(onThisMachine(peer, "putWithSignal"), src, dstOffset, slot, value, op);
    }

    @Override
    public void signal(int peer, int slot, long value, SignalOp op) {
        memory.signal(onThisMachine(peer, "signal"), slot, value, op);
    }

    @Override
    public long waitSignal(int slot, long atLeast, int fromRank) {
        return memory.waitSignal(slot, atLeast, onThisMachine(fromRank, "waitSignal"));
    }

    @Override
    public long readSignal(int slot) {
        return memory.readSignal(slot);
    }

    /** Collective: the machine's memory, then the machine's sub-group. */
    @Override
    public void close() {
        try {
            memory.close();
        } finally {
            machine.close();
        }
    }
}
