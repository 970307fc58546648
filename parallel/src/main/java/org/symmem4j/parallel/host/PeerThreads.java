package org.symmem4j.parallel.host;

import org.symmem4j.parallel.PeerTimeoutException;

/**
 * What {@link InJvmTransport} needs of a group whose ranks are threads of this JVM: an exchange of
 * live objects (the off-heap segments every rank maps directly), and a keeper that tells a rank's
 * memory when the world closes before the rank closed it (the memory then aborts its group; it is
 * never freed under threads that may still read it). Groups of that kind implement it,
 * so the transport asks for this capability, never for a group's class (as {@link PeerProcesses}
 * for {@link SharedMemoryTransport}).
 */
public interface PeerThreads {

    /**
     * Collective: every rank contributes {@code mine}; returns every rank's object in rank order.
     *
     * @param tag  names this exchange; equal on every rank and unique within the group
     * @param mine this rank's contribution
     * @return every rank's contribution, in rank order
     * @throws PeerTimeoutException when a rank does not arrive within the group's timeout, or is gone,
     *                              or the group is aborted
     */
    Object[] allGatherObjects(String tag, Object mine);

    /**
     * Keeps {@code resource} to close when the ranks' world closes, in case its rank has not closed it by then.
     * That close runs on the world closer's thread while the rank's threads may still run: it must not free
     * memory they can read (a memory's part aborts its group and stays mapped until its rank closes it).
     *
     * @param resource memory of this rank
     */
    void keepUntilWorldCloses(AutoCloseable resource);

    /**
     * Drops a resource its rank closed itself.
     *
     * @param resource a resource passed to {@link #keepUntilWorldCloses} before
     */
    void forget(AutoCloseable resource);
}
