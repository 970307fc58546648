package org.symmem4j.parallel.multinode;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.group.ProcessGroupConfig;

/**
 * Which ranks of a group share a machine ("node"): rank {@code r} is local rank {@code r % ranksPerNode}
 * of node {@code r / ranksPerNode}. Launchers (symmem4j-run, torchrun, mpirun with its default
 * by-slot mapping) number ranks node by node, and the collectives between nodes rely on it: a group
 * whose nodes hold different rank counts, or whose ranks interleave nodes, is refused.
 *
 * <p>A rank's node is its machine's host name, or {@code SYMMEM4J_NODE_ID} where set (containers
 * with one host name each on one machine, or several names for one machine). Tests and benchmarks
 * pretend one machine is several with {@code -Dsymmem4j.pretend.ranks.per.node=k} (or
 * {@code SYMMEM4J_PRETEND_RANKS_PER_NODE}; {@link Configuration#PRETEND_RANKS_PER_NODE}): node {@code r / k}, {@code r} being the process's rank in the job
 * ({@code RANK}, else Open MPI's {@code OMPI_COMM_WORLD_RANK}), so that a sub-group's ranks keep their machines;
 * for threads of one JVM (no such variable), the group's own rank.
 *
 * @param nodes        the number of machines
 * @param ranksPerNode ranks on each machine
 * @param node         this rank's machine, 0 .. nodes-1
 * @param localRank    this rank's index on its machine, 0 .. ranksPerNode-1
 */
public record NodeTopology(int nodes, int ranksPerNode, int node, int localRank) {

    /** Pretends every {@code k} consecutive ranks are one machine (tests, benchmarks): {@link Configuration#PRETEND_RANKS_PER_NODE}. */
    public static final String PRETEND_PROPERTY = Configuration.PRETEND_RANKS_PER_NODE.property();
    /** The environment variable form of {@link #PRETEND_PROPERTY}. */
    public static final String PRETEND_ENV = Configuration.PRETEND_RANKS_PER_NODE.env();
    /** Overrides the host name as this rank's machine identity: {@link Configuration#NODE_ID}. */
    public static final String NODE_ID_ENV = Configuration.NODE_ID.env();

    /** Each group's layout once learned (a group's ranks never move): groups are weak keys, gone with their group. */
    private static final Map<Group, NodeTopology> KNOWN = java.util.Collections.synchronizedMap(new java.util.WeakHashMap<>());

    /**
     * Every rank's machine, agreed over the group's store: collective at a group's first call (every rank of the group
     * makes it at the same point, as the transports do at the group's first allocation or communicator), then
     * remembered for the group's life, so later calls exchange nothing.
     *
     * @param group the group
     * @return this rank's view of the layout
     * @throws IllegalArgumentException when machines hold different rank counts, or a machine's ranks are
     *                                  not consecutive (the message lists each rank's machine)
     */
    public static NodeTopology of(Group group) {
        NodeTopology known = KNOWN.get(group);
        if (known != null) {
            return known;
        }
        // the exchange waits for the group's other ranks: not inside the map's lock, which their threads may need
        NodeTopology learned = learn(group);
        KNOWN.put(group, learned);
        return learned;
    }

    private static NodeTopology learn(Group group) {
        int size = group.worldSize();
        Integer pretend = Configuration.PRETEND_RANKS_PER_NODE.get();
        List<String> ids = new ArrayList<>(size);
        if (pretend != null) {
            int k = pretend;
            OptionalInt jobRank = ProcessGroupConfig.jobRank(System.getenv());
            if (jobRank.isPresent()) {
                // the process's rank in the job, exchanged: a sub-group's ranks keep the machines they pretend to be on
                for (byte[] id : group.allGatherBytes("symmem4j-node-topology",
                        ("pretend-node-" + jobRank.getAsInt() / k).getBytes(StandardCharsets.UTF_8))) {
                    ids.add(new String(id, StandardCharsets.UTF_8));
                }
            } else {
                // threads of one JVM (no job rank): the group's own ranks
                for (int r = 0; r < size; r++) {
                    ids.add("pretend-node-" + r / k);
                }
            }
        } else {
            for (byte[] id : group.allGatherBytes("symmem4j-node-topology", nodeId().getBytes(StandardCharsets.UTF_8))) {
                ids.add(new String(id, StandardCharsets.UTF_8));
            }
        }
        return fromIds(ids, group.rank());
    }

    /**
     * Where rank {@code rank}'s block goes in the packed order of a hierarchical reduce-scatter: the blocks of local
     * rank {@code l} of every machine together, in machine order, so that the machine's own reduce-scatter gives local
     * rank {@code l} every machine's block {@code l}, and the reduce-scatter between machines then each rank its own.
     *
     * @param rank a rank of the group, {@code node × ranksPerNode + localRank}
     * @return the block's index in the packed order, {@code localRank × nodes + node}
     */
    public long packedIndex(int rank) {
        return (long) (rank % ranksPerNode) * nodes + rank / ranksPerNode;
    }

    /** The layout for every rank's machine identity {@code ids} (rank order), seen from {@code rank}. */
    static NodeTopology fromIds(List<String> ids, int rank) {
        List<String> order = new ArrayList<>();
        for (String id : ids) {
            if (order.isEmpty() || !order.getLast().equals(id)) {
                if (order.contains(id)) {
                    throw new IllegalArgumentException("the ranks of machine '" + id + "' are not consecutive: machines by"
                            + " rank " + ids + " (fix: start the processes machine by machine: symmem4j-run and"
                            + " torchrun do;"
                            + " with mpirun, map by slot)");
                }
                order.add(id);
            }
        }
        int perNode = ids.size() / order.size();
        for (String id : order) {
            long count = ids.stream().filter(id::equals).count();
            if (count != perNode) {
                throw new IllegalArgumentException("machine '" + id + "' runs " + count + " ranks, expected " + perNode
                        + " on every machine: machines by rank " + ids + " (fix: start as many processes on"
                        + " each machine)");
            }
        }
        return new NodeTopology(order.size(), perNode, rank / perNode, rank % perNode);
    }

    private static String nodeId() {
        String id = Configuration.NODE_ID.get();
        if (id != null) {
            return id;
        }
        try {
            return Files.readString(Path.of("/proc/sys/kernel/hostname")).strip();
        } catch (IOException e) {
            try {
                return java.net.InetAddress.getLocalHost().getHostName();
            } catch (IOException e2) {
                throw new IllegalStateException("cannot tell this machine's name (fix: set"
                        + " " + NODE_ID_ENV + "): " + e2, e2);
            }
        }
    }
}
