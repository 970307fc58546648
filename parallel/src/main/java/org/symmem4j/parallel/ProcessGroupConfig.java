package org.symmem4j.parallel;

import java.util.Map;

/**
 * Where a process rank sits in its group, in torchrun's terms.
 *
 * @param rank       {@code RANK}: 0..worldSize-1
 * @param worldSize  {@code WORLD_SIZE}: number of processes
 * @param localRank  {@code LOCAL_RANK}: rank on this machine (defaults to {@code RANK})
 * @param masterAddr {@code MASTER_ADDR}: where rank 0 hosts the rendezvous store (default 127.0.0.1)
 * @param masterPort {@code MASTER_PORT}: its port (default 29500, torchrun's)
 */
public record ProcessGroupConfig(int rank, int worldSize, int localRank, String masterAddr, int masterPort) {

    public static final String DEFAULT_MASTER_ADDR = "127.0.0.1";
    public static final int DEFAULT_MASTER_PORT = 29500;

    public ProcessGroupConfig {
        if (worldSize < 1) {
            throw new IllegalArgumentException("WORLD_SIZE=" + worldSize + " must be >= 1");
        }
        if (rank < 0 || rank >= worldSize) {
            throw new IllegalArgumentException("RANK=" + rank + " outside [0, WORLD_SIZE=" + worldSize + ")");
        }
        if (localRank < 0) {
            throw new IllegalArgumentException("LOCAL_RANK=" + localRank + " must be >= 0");
        }
        if (masterAddr == null || masterAddr.isBlank()) {
            throw new IllegalArgumentException("MASTER_ADDR is empty (set it to rank 0's address, e.g. 127.0.0.1)");
        }
        if (masterPort < 1 || masterPort > 65535) {
            throw new IllegalArgumentException("MASTER_PORT=" + masterPort + " outside [1, 65535]");
        }
    }

    /** Reads the process environment. */
    public static ProcessGroupConfig fromEnvironment() {
        return fromEnvironment(System.getenv());
    }

    /** Reads torchrun's variables from {@code env}; {@code RANK} and {@code WORLD_SIZE} are required. */
    public static ProcessGroupConfig fromEnvironment(Map<String, String> env) {
        int rank = intVar(env, "RANK", null);
        int worldSize = intVar(env, "WORLD_SIZE", null);
        int localRank = intVar(env, "LOCAL_RANK", rank);
        String addr = env.getOrDefault("MASTER_ADDR", DEFAULT_MASTER_ADDR);
        int port = intVar(env, "MASTER_PORT", DEFAULT_MASTER_PORT);
        return new ProcessGroupConfig(rank, worldSize, localRank, addr, port);
    }

    private static int intVar(Map<String, String> env, String name, Integer fallback) {
        String v = env.get(name);
        if (v == null || v.isBlank()) {
            if (fallback == null) {
                throw new IllegalArgumentException(name + " is not set (a process group needs RANK and WORLD_SIZE,"
                        + " and MASTER_ADDR/MASTER_PORT for rank 0's store, as torchrun sets them)");
            }
            return fallback;
        }
        try {
            return Integer.parseInt(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(name + "=" + v + " is not an integer", e);
        }
    }
}
