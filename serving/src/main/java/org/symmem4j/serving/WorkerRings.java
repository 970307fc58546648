package org.symmem4j.serving;

import java.util.ArrayList;
import java.util.List;

import org.symmem4j.parallel.Group;
import org.symmem4j.state.SymmetricRingBuffer;

/**
 * The rings between a router rank and every other rank of a host group, made collectively in the same order on
 * every rank: for each worker rank w (ascending), a one-to-one request ring router to w, then a one-to-one reply ring
 * w to router. {@link ProcessWorkers} and {@link WorkerProcess} both make them through this class, so the order can
 * not differ between the two sides.
 */
final class WorkerRings implements AutoCloseable {

    final Group group;
    final int router;
    final List<Integer> workers = new ArrayList<>();
    final List<SymmetricRingBuffer> requests = new ArrayList<>();
    final List<SymmetricRingBuffer> replies = new ArrayList<>();

    private WorkerRings(Group group, int router) {
        this.group = group;
        this.router = router;
    }

    /**
     * Collective.
     *
     * @param group        the host group
     * @param router       the router's rank (the weights' owner)
     * @param ringCapacity bytes of each ring, a power of two
     * @return the rings
     */
    static WorkerRings create(Group group, int router, int ringCapacity) {
        if (group.worldSize() < 2) {
            throw new IllegalArgumentException("worker processes need a group of 2 or more ranks, found worldSize="
                    + group.worldSize() + " (fix: start the router and at least one worker process in one group, e.g."
                    + " with the launcher's --nproc-per-node)");
        }
        if (router < 0 || router >= group.worldSize()) {
            throw new IllegalArgumentException("router rank=" + router + " expected 0.." + (group.worldSize() - 1)
                    + " (fix: pass the rank that owns the shared weights)");
        }
        WorkerRings rings = new WorkerRings(group, router);
        try {
            for (int w = 0; w < group.worldSize(); w++) {
                if (w == router) {
                    continue;
                }
                rings.workers.add(w);
                rings.requests.add(SymmetricRingBuffer.oneToOne(group, router, w, ringCapacity));
                rings.replies.add(SymmetricRingBuffer.oneToOne(group, w, router, ringCapacity));
            }
        } catch (RuntimeException e) {
            rings.close();
            throw e;
        }
        return rings;
    }

    /** {@return the index of worker rank {@code rank} in the lists} */
    int indexOf(int rank) {
        return workers.indexOf(rank);
    }

    /**
     * Collective: frees every ring. When a rank of the group has exited (a worker process that died), the rings'
     * collective close cannot complete: the group is aborted first, with a message naming the rank, so that every
     * live rank frees its part at once instead of waiting for the dead one.
     */
    @Override
    public void close() {
        for (int r = 0; r < group.worldSize(); r++) {
            if (!group.isAlive(r) && !group.abortState().isRaised()) {
                group.abort("serving: " + group.describe(r) + " exited; the worker rings are freed without their"
                        + " collective close");
            }
        }
        for (int i = 0; i < requests.size(); i++) {
            requests.get(i).close();
            if (i < replies.size()) {
                replies.get(i).close();
            }
        }
    }
}
