package org.symmem4j.parallel.host;

/**
 * What {@link SharedMemoryTransport} needs to know of a group's processes: each rank's pid and
 * start time, from which it builds the rank's {@code /dev/shm} file names itself (nothing read from
 * the store becomes a path). The group that creates the transport supplies it, so the transport
 * never looks at the group's class.
 */
public interface PeerProcesses {

    /**
     * Pid of rank {@code rank}'s process.
     *
     * @param rank a rank of the group
     * @return the process id
     */
    long pid(int rank);

    /**
     * Start time of rank {@code rank}'s process.
     *
     * @param rank a rank of the group
     * @return epoch milliseconds, 0 when unknown
     */
    long startMillis(int rank);

    /**
     * Rank {@code rank}'s rank in the world group, which its file names carry: equal to {@code rank}
     * for a world group, the member's world rank for a sub-group.
     *
     * @param rank a rank of the group
     * @return its rank in the world
     */
    default int worldRank(int rank) {
        return rank;
    }

    /**
     * The group's launch token: a random number rank 0 drew for this launch of the group, which every
     * rank learned when the group formed. Every pad of the group carries it, and a mapper refuses a file
     * whose pad carries another (a process of another job started with the same run id created it).
     *
     * @return the token, 0 where the group has none
     */
    default long launchToken() {
        return 0;
    }
}
