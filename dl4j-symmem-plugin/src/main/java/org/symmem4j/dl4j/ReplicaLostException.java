package org.symmem4j.dl4j;

import java.util.List;

/**
 * What {@code fit()} throws on a rank that is alive but leaves an in-place shrink of a {@code dp x tp} mesh
 * ({@link WorkerFailure#SHRINK} with {@code group(mesh, "dp")}): another rank of its data-parallel replica (a
 * tensor-parallel peer) died, so its replica cannot go on, and the survivors go on without the whole replica. Group
 * mode with hybrid sharding ({@code shardGroupSize}) throws it too, on the live ranks of a dead rank's shard group
 * ({@link #worker()} is then the shard group's index, {@link #deadRanks()} the group's dead ranks). The
 * model is as it was before this {@code fit()}; the program should end (status 0: nothing went wrong on this rank),
 * as the dead peer's did, so that the launcher's job ends once the survivors finish.
 */
public final class ReplicaLostException extends DataParallelTrainingException {

    private final transient List<Integer> deadRanks;

    ReplicaLostException(String message, int replica, long step, List<Integer> deadRanks, Throwable cause) {
        super(message, replica, step, cause);
        this.deadRanks = List.copyOf(deadRanks);
    }

    /**
     * {@return the ranks of the mesh's group (the world; with hybrid sharding, the wrapper's group) whose deaths took
     * this replica out, ascending}
     */
    public List<Integer> deadRanks() {
        return deadRanks;
    }
}
