package org.symmem4j.launch;

import java.nio.file.Path;
import java.util.List;

/**
 * What the user asked the launcher for, in torchrun's terms.
 *
 * @param nprocPerNode processes on this machine: a number, {@code gpu} (one per GPU) or {@code cpu} (one per CPU)
 * @param nnodes       machines in the job
 * @param nodeRank     this machine's index, 0..nnodes-1
 * @param masterAddr   where rank 0 (on node 0) hosts the rendezvous store
 * @param masterPort   its port
 * @param runId        the job's id, null for a fresh one (one machine only)
 * @param cpuBind      whether each process is bound to a slice of the CPUs
 * @param secretFile   the job's store secret, null to use the environment's or generate one (one machine only)
 * @param java         whether the command is the arguments of this launcher's JDK ({@code java} with
 *                     the flags symmem4j needs) rather than a program of its own
 * @param command      the program and its arguments
 * @param maxRestarts  how many times a failed job is started again, as a new generation (torchrun's
 *                     {@code --max-restarts}); 0: never
 * @param minNodes     0 for a job of {@code nnodes} machines; MIN of {@code --nnodes MIN:MAX}, an elastic job whose
 *                     launchers meet in a rendezvous each generation ({@link NodeRendezvous}), which sets
 *                     {@code nnodes} and {@code nodeRank} ({@link #withNodes})
 */
record LaunchSpec(String nprocPerNode, int nnodes, int nodeRank, String masterAddr, int masterPort, String runId,
                  CpuBind cpuBind, Path secretFile, boolean java, List<String> command, int maxRestarts, int minNodes) {

    /** A job of a fixed number of machines. */
    LaunchSpec(String nprocPerNode, int nnodes, int nodeRank, String masterAddr, int masterPort, String runId,
               CpuBind cpuBind, Path secretFile, boolean java, List<String> command, int maxRestarts) {
        this(nprocPerNode, nnodes, nodeRank, masterAddr, masterPort, runId, cpuBind, secretFile, java, command, maxRestarts,
                0);
    }

    /** Whether the machines meet in a rendezvous each generation ({@code --nnodes MIN:MAX}). */
    boolean elasticNodes() {
        return minNodes > 0;
    }

    /** This spec for one generation of an elastic job: the machines the rendezvous let in, and this one's node rank. */
    LaunchSpec withNodes(int machines, int rank) {
        return new LaunchSpec(nprocPerNode, machines, rank, masterAddr, masterPort, runId, cpuBind, secretFile, java,
                command, maxRestarts, minNodes);
    }

    /** How processes get CPUs. */
    enum CpuBind {
        /** Each process gets its own contiguous slice of the launcher's CPUs ({@code taskset -c}) and as many ND4J/OpenMP threads. */
        AUTO,
        /** Processes share every CPU; nothing is set. */
        NONE
    }

    LaunchSpec {
        command = List.copyOf(command);
    }
}
