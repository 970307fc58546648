package org.symmem4j.parallel.cuda;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.cuda.ffi.Nccl;

/**
 * One transport's NCCL communicators across an in-place shrink ({@code ProcessGroup.shrink()}), so that the survivors'
 * new communicators come from {@code ncclCommShrink} of the old ones rather than from a new unique id:
 * <ol>
 *   <li>{@link #begin}: the group shrinks; every open NCCL communicator of its size on this transport is marked with the
 *       dead ranks;</li>
 *   <li>a marked communicator that is closed (the old group's communicators, closed by the caller) is not destroyed but
 *       <em>parked</em> — destroying would wait for the dead ranks — with its window's buffer;</li>
 *   <li>{@link #take}: a new communicator of the survivors' size on the same GPU takes the oldest parked one, in the order
 *       they were opened (every survivor opens its communicators in the same order, as it always must), and shrinks it;
 *       {@link #retire} then aborts the parent and frees its window's buffer;</li>
 *   <li>what nobody takes is aborted once the survivors rebuilt ({@code Transport.rebuilt}), at the next {@link #begin}
 *       and at the transport's close ({@link #abortParked}): nothing of the old group stays on the GPU. Where the bound
 *       NCCL has no {@code ncclCommShrink}, a marked communicator is aborted when closed, not parked.</li>
 * </ol>
 * Process-wide per transport; thread-safe.
 */
final class NcclShrinks {

    private static final Logger LOG = LoggerFactory.getLogger(NcclShrinks.class);

    /**
     * An old communicator parked for the survivors.
     *
     * @param comm          the parent ncclComm_t
     * @param windowPointer its NCCL_SYMMETRIC window's buffer (ncclMemAlloc), 0 when none
     * @param ordinal       the GPU it was made on
     * @param worldSize     its size
     * @param dead          its ranks that are gone
     * @param opened        when it was opened among this transport's communicators (the survivors take them in this order)
     */
    record Parent(MemorySegment comm, long windowPointer, int ordinal, int worldSize, int[] dead, long opened) {
    }

    /** Open communicators with their GPU, size and opening number. */
    private final Map<NcclProvider, long[]> open = new IdentityHashMap<>();
    private long opening;
    /** Open communicators marked by {@link #begin}: the dead ranks of their group. */
    private final Map<NcclProvider, int[]> marked = new IdentityHashMap<>();
    private final List<Parent> parked = new ArrayList<>();

    /** An NCCL communicator of {@code worldSize} ranks was made on GPU {@code ordinal}. */
    synchronized void opened(NcclProvider p, int ordinal, int worldSize) {
        open.put(p, new long[] {ordinal, worldSize, opening++});
    }

    /**
     * A group of {@code worldSize} ranks on this transport shrinks without {@code dead}: its open communicators are
     * marked (parked when closed); parents left from an earlier shrink are aborted first.
     */
    void begin(int worldSize, List<Integer> dead) {
        abortParked();
        int[] gone = dead.stream().mapToInt(Integer::intValue).toArray();
        synchronized (this) {
            open.forEach((p, facts) -> {
                if (facts[1] == worldSize) {
                    marked.put(p, gone);
                }
            });
        }
    }

    /**
     * {@code p} closes: null when it is to be destroyed as usual, else it is parked, or aborted where NCCL cannot shrink
     * (either way the caller must not destroy it).
     *
     * @return the parked parent, or null
     */
    synchronized Parent close(NcclProvider p, MemorySegment comm, long windowPointer) {
        long[] facts = open.remove(p);
        int[] dead = marked.remove(p);
        if (dead == null || facts == null) {
            return null;
        }
        Parent parent = new Parent(comm, windowPointer, (int) facts[0], (int) facts[1], dead, facts[2]);
        if (Nccl.get().hasShrink()) {
            parked.add(parent);
        } else {
            retire(parent); // nobody can shrink it: aborted now (destroying it would wait for the dead ranks)
        }
        return parent;
    }

    /** {@code p} was aborted: it is neither open nor marked any more. */
    synchronized void aborted(NcclProvider p) {
        open.remove(p);
        marked.remove(p);
    }

    /**
     * The oldest parked parent whose survivors are {@code worldSize} ranks and which was made on GPU {@code ordinal}, taken
     * off the list; null when there is none (then a new communicator comes from a unique id).
     */
    synchronized Parent take(int worldSize, int ordinal) {
        Parent oldest = null;
        for (Parent p : parked) {
            if (p.ordinal() == ordinal && p.worldSize() - p.dead().length == worldSize
                    && (oldest == null || p.opened() < oldest.opened())) {
                oldest = p;
            }
        }
        parked.remove(oldest);
        return oldest;
    }

    /** Aborts a parent (shrunk or not wanted) and frees its window's buffer. */
    static void retire(Parent p) {
        try {
            Nccl.get().abort(p.comm());
        } finally {
            if (p.windowPointer() != 0) {
                Nccl.get().memFree(p.windowPointer());
            }
        }
    }

    /** Aborts every parked parent nobody took. */
    void abortParked() {
        List<Parent> left;
        synchronized (this) {
            left = List.copyOf(parked);
            parked.clear();
        }
        for (Parent p : left) {
            try {
                retire(p);
            } catch (RuntimeException e) {
                LOG.warn("NCCL communicator of {} ranks (without {}) left from a shrink could not be aborted: {}",
                        p.worldSize(), Arrays.toString(p.dead()), e.toString());
            }
        }
    }
}
