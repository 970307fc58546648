package org.symmem4j.parallel.cuda;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.locks.LockSupport;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.PeerTimeoutException;

/**
 * Keeps the ranks' hosts in step, one unit of GPU work at a time, where the ranks are threads of one process: a rank
 * enqueues its unit {@code n + 1} only after every peer has finished enqueuing its unit {@code n}. The hosts never
 * wait for the GPUs here, only for each other's enqueueing, which takes microseconds.
 *
 * <p>Why (the fused tensor-parallel calls, {@link CudaTensorParallelGemm}): each call's copy stream waits, through an
 * event, for a meeting that needs every peer's previous call, and the copies move blocks between the GPUs. On 4 H200s in
 * one JVM the fused calls deadlocked on the GPUs in every run where the hosts ran free (all four hosts done enqueuing
 * and waiting for their streams; the same with programmatic dependent launch off, with a hardware queue per stream
 * and with eager module loading), and never with the hosts kept in step
 * (bench/results/2026-11-26-gpu-4xh200.md). The stream and event order of every rank is a valid order on its own,
 * so what couples the ranks is the order in which their work reached the driver: copies between the GPUs of one
 * process behave as if queued in submission order behind a rank's copy that waits for a later meeting. With every
 * unit n enqueued everywhere before any unit n + 1, no rank's wait can sit ahead of a copy it depends on.
 *
 * <p>Ranks in processes of their own get no order (their copies go through another process's mappings; the deadlock
 * was not seen nor studied there): {@link #join} returns null.
 */
final class EnqueueOrder {

    /** The orders of this process by key (rank 0's proposal), with the ranks that joined each. */
    private static final Map<Long, EnqueueOrder> BY_KEY = new HashMap<>();
    private static final AtomicLong NEXT_KEY = new AtomicLong(1);
    /** Spin this long before parking between checks: a peer's host is usually a few microseconds behind. */
    private static final long SPIN_NANOS = 50_000;

    private final long key;
    /** Units each rank has finished enqueuing (written by that rank only; read by its peers). */
    private final AtomicLongArray enqueued;
    private int users;

    private EnqueueOrder(long key, int world) {
        this.key = key;
        this.enqueued = new AtomicLongArray(world);
    }

    /**
     * Collective: the order shared by this group's ranks in this process, or null when the ranks run in processes of
     * their own (or in several processes).
     *
     * @param group the ranks to keep in step
     * @param what  names the exchange (one key per use)
     * @return this rank's seat, or null
     */
    static Seat join(Group group, String what) {
        ByteBuffer mine = ByteBuffer.allocate(2 * Long.BYTES);
        mine.putLong(ProcessHandle.current().pid()).putLong(group.rank() == 0 ? NEXT_KEY.getAndIncrement() : 0);
        List<byte[]> all = group.allGatherBytes(what + "-enqueue-order", mine.array());
        long pid = ByteBuffer.wrap(all.get(0)).getLong();
        for (byte[] b : all) {
            if (ByteBuffer.wrap(b).getLong() != pid) {
                return null;
            }
        }
        long key = ByteBuffer.wrap(all.get(0)).getLong(Long.BYTES);
        synchronized (BY_KEY) {
            EnqueueOrder order = BY_KEY.computeIfAbsent(key, k -> new EnqueueOrder(k, group.worldSize()));
            order.users++;
            return order.new Seat(group.rank(), group.options().timeout(), what);
        }
    }

    /** One rank's place in the order. */
    final class Seat {
        private final int rank;
        private final Duration timeout;
        private final String what;
        private long next;
        private boolean left;

        private Seat(int rank, Duration timeout, String what) {
            this.rank = rank;
            this.timeout = timeout;
            this.what = what;
        }

        /**
         * Returns once every peer has finished enqueuing the unit before this rank's next one.
         *
         * @throws PeerTimeoutException naming the ranks still behind, after the group's timeout
         */
        void enter() {
            long deadline = System.nanoTime() + timeout.toNanos();
            long spinUntil = System.nanoTime() + SPIN_NANOS;
            while (true) {
                List<Integer> behind = null;
                for (int p = 0; p < enqueued.length(); p++) {
                    // acquire: pairs with the peer's release in exit(); its unit's enqueues happened before
                    if (p != rank && enqueued.get(p) < next) {
                        if (behind == null) {
                            behind = new ArrayList<>();
                        }
                        behind.add(p);
                    }
                }
                if (behind == null) {
                    return;
                }
                long now = System.nanoTime();
                if (now - deadline > 0) {
                    throw new PeerTimeoutException(what + " call " + next + " on rank " + rank + ": ranks " + behind
                            + " have not enqueued call " + (next - 1) + " after " + timeout + " (every rank must make the"
                            + " same fused calls in the same order; a rank that stopped making them leaves its peers here;"
                            + " fix: make the same fused calls on every rank, and see the behind ranks' own errors)",
                            rank, behind, what + " call " + next, PeerTimeoutException.Reason.DEADLINE_PASSED, timeout);
                }
                if (now - spinUntil < 0) {
                    Thread.onSpinWait();
                } else {
                    LockSupport.parkNanos(20_000);
                }
            }
        }

        /** This rank has finished enqueuing its unit: peers may enqueue their next one. */
        void exit() {
            next++;
            // release: the unit's enqueues happen before a peer's acquire in enter() sees the count
            enqueued.set(rank, next);
        }

        /** Leaves the order (the last rank of the process to leave removes it). */
        void leave() {
            if (left) {
                return;
            }
            left = true;
            synchronized (BY_KEY) {
                if (--users == 0) {
                    BY_KEY.remove(key);
                }
            }
        }
    }

    /** Orders alive in this process (tests). */
    static int live() {
        synchronized (BY_KEY) {
            return BY_KEY.size();
        }
    }
}
