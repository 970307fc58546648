package org.symmem4j.parallel.rendezvous;

import java.util.regex.Pattern;

/**
 * Which group a store serves, and which group a connecting rank belongs to: a run id shared by
 * every rank of one job (torchrun's rendezvous id), the generation of the group within that run
 * (0 for a job's first group, then 1, 2, ... as the job creates groups one after another on the
 * same address), and the group's size. A store refuses a rank whose identity differs, so two jobs
 * on one port never merge, and a rank of an earlier or later group never joins this one.
 *
 * @param runId      the run id: 1 to 128 characters of {@code [A-Za-z0-9._:@+-]}
 * @param generation which group of the run on this store address, from 0
 * @param worldSize  ranks in the group
 */
public record JobIdentity(String runId, long generation, int worldSize) {

    private static final Pattern RUN_ID = Pattern.compile("[A-Za-z0-9._:@+-]{1,128}");

    /**
     * Validates the components.
     *
     * @throws IllegalArgumentException if {@code runId} is malformed, {@code generation} is negative or {@code worldSize} is below 1
     */
    public JobIdentity {
        checkRunId(runId);
        if (generation < 0) {
            throw new IllegalArgumentException("generation=" + generation + " must be >= 0 (fix: let the"
                    + " launcher set SYMMEM4J_RESTART_GENERATION, or unset it)");
        }
        if (worldSize < 1) {
            throw new IllegalArgumentException("worldSize=" + worldSize + " must be >= 1 (fix: let the launcher"
                    + " set WORLD_SIZE)");
        }
    }

    /**
     * Throws a clear error unless {@code runId} is 1 to 128 characters of {@code [A-Za-z0-9._:@+-]}.
     *
     * @param runId the run id to check
     * @return {@code runId}
     * @throws IllegalArgumentException if it is null or malformed
     */
    public static String checkRunId(String runId) {
        if (runId == null || !RUN_ID.matcher(runId).matches()) {
            throw new IllegalArgumentException("run id=" + (runId == null ? "null" : "'" + runId + "'")
                    + " must be 1 to 128 characters of letters, digits and . _ : @ + -"
                    + " (fix: set SYMMEM4J_RUN_ID to such a value on every rank of the job)");
        }
        return runId;
    }

    @Override
    public String toString() {
        return "run '" + runId + "' generation " + generation + " (world size " + worldSize + ")";
    }
}
