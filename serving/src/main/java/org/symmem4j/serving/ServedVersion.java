package org.symmem4j.serving;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One published version of a model and its readers. The reference count starts at 1, the router's own reference
 * while the version is current or kept for rollback; every batch (and every {@link ModelRouter.Lease}) that runs on
 * it holds one more. The router drops its reference when it retires the version; whoever drops the last one frees
 * the version's shared parameters. A count of 0 is final: {@link #tryAcquire} fails from then on, so no reader
 * starts on freed memory.
 */
final class ServedVersion {

    final String model;
    final long version;
    final ModelSpec spec;
    final MemorySegment params;
    private final Runnable free;
    private final AtomicInteger references = new AtomicInteger(1);
    /** Network objects over {@link #params}, one per thread at a time; grown on demand up to the worker count. */
    private final ConcurrentLinkedQueue<ModelSpec.Network> idle = new ConcurrentLinkedQueue<>();

    ServedVersion(String model, long version, ModelSpec spec, MemorySegment params, Runnable free) {
        this.model = model;
        this.version = version;
        this.spec = spec;
        this.params = params;
        this.free = free;
    }

    /** {@return true when a reference was taken; false once the version is freed (count 0)} */
    boolean tryAcquire() {
        while (true) {
            int c = references.get();
            if (c == 0) {
                return false;
            }
            if (references.compareAndSet(c, c + 1)) {
                return true;
            }
        }
    }

    /** Drops a reference; the last one frees the version. */
    void release() {
        int left = references.decrementAndGet();
        if (left == 0) {
            idle.clear();
            free.run();
        } else if (left < 0) {
            throw org.symmem4j.parallel.Invariants.violated("model " + model + " version=" + version + " released"
                    + " more often than acquired");
        }
    }

    /** {@return the references held now (the router's and its readers')} */
    int references() {
        return references.get();
    }

    /** {@return a network over the shared parameters for this thread's use; give it back with {@link #giveBack}} */
    ModelSpec.Network borrow() {
        ModelSpec.Network n = idle.poll();
        return n != null ? n : spec.networkOver(params);
    }

    void giveBack(ModelSpec.Network network) {
        idle.offer(network);
    }
}
