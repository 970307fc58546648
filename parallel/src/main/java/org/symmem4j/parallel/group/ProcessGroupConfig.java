package org.symmem4j.parallel.group;

import java.time.Instant;
import java.util.Map;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.rendezvous.JobIdentity;

/**
 * Where a process rank sits in its group, in torchrun's terms, and which job it belongs to.
 *
 * <p>Read from torchrun's variables, which {@code symmem4j-run} sets too, or, when {@code RANK} is
 * unset, from Open MPI's ({@code OMPI_COMM_WORLD_RANK}, {@code _SIZE}, {@code _LOCAL_RANK},
 * {@code _LOCAL_SIZE}) for processes started by {@code mpirun}.
 *
 * @param rank       {@code RANK}: 0..worldSize-1
 * @param worldSize  {@code WORLD_SIZE}: number of processes
 * @param localRank  {@code LOCAL_RANK}: rank on this machine (defaults to {@code RANK})
 * @param localWorldSize {@code LOCAL_WORLD_SIZE}: processes on this machine (defaults to {@code WORLD_SIZE})
 * @param masterAddr {@code MASTER_ADDR}: where rank 0 hosts the rendezvous store (default 127.0.0.1)
 * @param masterPort {@code MASTER_PORT}: its port (default 29500, torchrun's)
 * @param runId      {@code SYMMEM4J_RUN_ID} (or torchrun's {@code TORCHELASTIC_RUN_ID}): the job's id,
 *                   the same on every rank; the store refuses ranks of another run. By default
 *                   {@link #defaultRunId()}: the parent process, which every rank started by one
 *                   launcher, script or {@code mpirun} shares and two launches never do
 */
public record ProcessGroupConfig(int rank, int worldSize, int localRank, int localWorldSize, String masterAddr, int masterPort,
                                 String runId) {

    /** {@code MASTER_ADDR} when unset: loopback. */
    public static final String DEFAULT_MASTER_ADDR = "127.0.0.1";
    /** {@code MASTER_PORT} when unset: 29500, torchrun's. */
    public static final int DEFAULT_MASTER_PORT = 29500;
    /** The environment variable of the run id: {@link Configuration#RUN_ID}. */
    public static final String RUN_ID_ENV = Configuration.RUN_ID.env();
    /** torchrun's run id variable, read when {@code SYMMEM4J_RUN_ID} is unset. */
    public static final String TORCH_RUN_ID_ENV = "TORCHELASTIC_RUN_ID";
    /** Open MPI's rank variable, read (with its siblings) when {@code RANK} is unset. */
    static final String OMPI_RANK = "OMPI_COMM_WORLD_RANK";

    /**
     * Checks the configuration.
     *
     * @throws IllegalArgumentException when a value is out of range (the message names the variable)
     */
    public ProcessGroupConfig {
        if (worldSize < 1) {
            throw new IllegalArgumentException("WORLD_SIZE=" + worldSize + " must be >= 1 (the number of processes in the job;"
                    + " fix: start the job with symmem4j-run -n N or torchrun --nproc-per-node N, which set it)");
        }
        if (rank < 0 || rank >= worldSize) {
            throw new IllegalArgumentException("RANK=" + rank + " outside [0, WORLD_SIZE=" + worldSize + ") (expected each process's own"
                    + " index below the job's size; fix: let the launcher set RANK, or give the processes 0 .. WORLD_SIZE-1)");
        }
        if (localWorldSize < 1 || localWorldSize > worldSize) {
            throw new IllegalArgumentException("LOCAL_WORLD_SIZE=" + localWorldSize + " outside [1, WORLD_SIZE=" + worldSize
                    + "] (the processes on this machine are some of the job's; fix: set LOCAL_WORLD_SIZE to the number"
                    + " started on this machine, or leave it unset when all run here)");
        }
        if (localRank < 0 || localRank >= localWorldSize) {
            throw new IllegalArgumentException("LOCAL_RANK=" + localRank + " outside [0, LOCAL_WORLD_SIZE=" + localWorldSize
                    + ") (expected this process's index among those on this machine; fix: let the launcher set it)");
        }
        if (masterAddr == null || masterAddr.isBlank()) {
            throw new IllegalArgumentException("MASTER_ADDR is empty (fix: set it to rank 0's address, e.g."
                    + " 127.0.0.1)");
        }
        if (masterPort < 1 || masterPort > 65535) {
            throw new IllegalArgumentException("MASTER_PORT=" + masterPort + " outside [1, 65535] (expected the TCP port of"
                    + " rank 0's store; fix: set MASTER_PORT to a free port, e.g. 29500, the same on every process)");
        }
        JobIdentity.checkRunId(runId);
    }

    /**
     * A rank of a job whose processes all run on this machine ({@code localWorldSize = worldSize}).
     *
     * @param rank       0..worldSize-1
     * @param worldSize  number of processes
     * @param localRank  rank on this machine
     * @param masterAddr where rank 0 hosts the store
     * @param masterPort its port, 1..65535
     * @param runId      the job's id
     * @throws IllegalArgumentException when a value is out of range
     */
    public ProcessGroupConfig(int rank, int worldSize, int localRank, String masterAddr, int masterPort, String runId) {
        this(rank, worldSize, localRank, worldSize, masterAddr, masterPort, runId);
    }

    /**
     * A rank of the job whose run id is {@link #defaultRunId()}.
     *
     * @param rank       0..worldSize-1
     * @param worldSize  number of processes
     * @param localRank  rank on this machine
     * @param masterAddr where rank 0 hosts the store
     * @param masterPort its port, 1..65535
     * @throws IllegalArgumentException when a value is out of range
     */
    public ProcessGroupConfig(int rank, int worldSize, int localRank, String masterAddr, int masterPort) {
        this(rank, worldSize, localRank, masterAddr, masterPort, defaultRunId());
    }

    /**
     * The run id ranks use when none is set: {@code ppid-<parent pid>-<parent start ms>}. Ranks that
     * one parent started together (a launcher, a shell script, {@code mpirun}'s daemon) share it;
     * ranks of another launch have another parent, so another id. Ranks started by hand from
     * separate shells, on several hosts, or two jobs started by one parent at once need
     * {@code SYMMEM4J_RUN_ID}.
     *
     * @return {@code ppid-<parent pid>-<parent start ms>}, or {@code ppid-unknown}
     */
    public static String defaultRunId() {
        return ProcessHandle.current().parent()
                .map(p -> "ppid-" + p.pid() + "-" + p.info().startInstant().map(Instant::toEpochMilli).orElse(0L))
                .orElse("ppid-unknown");
    }

    /**
     * Reads the process environment.
     *
     * @return the configuration the variables describe
     * @throws IllegalArgumentException when {@code RANK} or {@code WORLD_SIZE} is missing, or a value is malformed or out of range
     */
    public static ProcessGroupConfig fromEnvironment() {
        return fromEnvironment(System.getenv());
    }

    /**
     * Reads torchrun's variables from {@code env}; {@code RANK} and {@code WORLD_SIZE} are required.
     *
     * @param env variables by name
     * @return the configuration the variables describe
     * @throws IllegalArgumentException when {@code RANK} or {@code WORLD_SIZE} is missing, or a value is malformed or out of range
     */
    public static ProcessGroupConfig fromEnvironment(Map<String, String> env) {
        boolean openMpi = isBlank(env.get("RANK")) && !isBlank(env.get(OMPI_RANK));
        String prefix = openMpi ? "OMPI_COMM_WORLD_" : "";
        int rank = intVar(env, openMpi ? OMPI_RANK : "RANK", null);
        int worldSize = intVar(env, prefix + (openMpi ? "SIZE" : "WORLD_SIZE"), null);
        int localRank = intVar(env, prefix + "LOCAL_RANK", rank);
        int localWorldSize = intVar(env, openMpi ? prefix + "LOCAL_SIZE" : "LOCAL_WORLD_SIZE", worldSize);
        String addr = env.getOrDefault("MASTER_ADDR", DEFAULT_MASTER_ADDR);
        int port = intVar(env, "MASTER_PORT", DEFAULT_MASTER_PORT);
        String runId = Configuration.RUN_ID.get(Configuration.Source.environment(env));
        if (runId == null) {
            runId = env.get(TORCH_RUN_ID_ENV);
        }
        if (runId == null || runId.isBlank()) {
            runId = defaultRunId();
        }
        return new ProcessGroupConfig(rank, worldSize, localRank, localWorldSize, addr, port, runId.trim());
    }

    /**
     * This process's rank in its job as {@link #fromEnvironment(Map)} reads it ({@code RANK}, else Open MPI's
     * {@code OMPI_COMM_WORLD_RANK}), without needing the other variables.
     *
     * @param env variables by name
     * @return the rank, or empty when neither variable is set (threads of one JVM)
     * @throws IllegalArgumentException when the variable is not an integer
     */
    public static java.util.OptionalInt jobRank(Map<String, String> env) {
        String name = isBlank(env.get("RANK")) && !isBlank(env.get(OMPI_RANK)) ? OMPI_RANK : "RANK";
        return isBlank(env.get(name)) ? java.util.OptionalInt.empty() : java.util.OptionalInt.of(intVar(env, name, null));
    }

    private static boolean isBlank(String v) {
        return v == null || v.isBlank();
    }

    private static int intVar(Map<String, String> env, String name, Integer fallback) {
        String v = env.get(name);
        if (isBlank(v)) {
            if (fallback == null) {
                throw new IllegalArgumentException(name + " is not set (a process group needs RANK and WORLD_SIZE, and"
                        + " MASTER_ADDR/MASTER_PORT for rank 0's store, as symmem4j-run and torchrun set them; under"
                        + " mpirun, Open MPI's OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE; fix: start the"
                        + " job with symmem4j-run"
                        + " or torchrun, or set them)");
            }
            return fallback;
        }
        try {
            return Integer.parseInt(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(name + "=" + v + " is not an integer (expected a whole number, e.g. "
                    + name + "=0; fix: set it as a launcher does, or unset it)", e);
        }
    }
}
