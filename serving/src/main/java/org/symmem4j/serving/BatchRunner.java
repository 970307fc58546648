package org.symmem4j.serving;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Supplier;

import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.indexing.INDArrayIndex;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.serving.ServingException.Kind;

/**
 * Runs the batches {@link ModelRouter}'s workers form: each batch is split by the version its requests are pinned
 * to, each part takes a reference to its version, has its features assembled into the worker's reused buffer, and
 * runs either on a network object in this JVM (worker threads) or in a worker process ({@link ProcessWorkers});
 * then every request gets its rows of the outputs, or the failure. It also keeps the workers' batch buffers, and
 * frees the buffers of shapes no served version has once a version is freed ({@link #versionFreed}).
 */
final class BatchRunner {

    /** Where a batch gets its version: a reference the runner releases when the batch is done with it. */
    interface Versions {
        /**
         * @param m       the model
         * @param version a served version, or 0 for the current one
         * @return the version, acquired
         * @throws ServingException when the model or version is not served
         */
        ServedVersion acquire(ServedModel m, long version);
    }

    /**
     * One worker's batch buffers. A batch holds {@link #lock} while it assembles and runs; a sweep (after a version
     * was freed) takes it only with {@code tryLock}, so freeing never waits for a batch: a busy worker's sweep is left
     * in {@link #sweep} and done by whoever lets go of the lock next (the worker after its batch, or the sweeper).
     */
    static final class WorkerBuffers {
        final BatchAssembler assembler;
        final ReentrantLock lock = new ReentrantLock();
        volatile boolean sweep;

        WorkerBuffers(BatchAssembler assembler) {
            this.assembler = assembler;
        }

        /** Frees the buffers now (the worker leaves); waits for a batch that uses them. */
        void close() {
            lock.lock();
            try {
                assembler.close();
            } finally {
                lock.unlock();
            }
        }
    }

    private final RouterOptions options;
    /** Where batches run when not on this JVM's threads; null for worker threads. */
    private final ProcessWorkers processes;
    private final Versions versions;
    /** The (data type, example shape) of every version served now; buffers of other shapes are swept. */
    private final Supplier<Set<BatchAssembler.Shape>> liveShapes;
    /** Each worker's batch buffers, by worker index. */
    private final List<WorkerBuffers> workerBuffers = new ArrayList<>();

    /**
     * @param options    batching settings ({@code workers}: one set of buffers each)
     * @param processes  the worker processes batches go to; null to run them on the calling thread
     * @param versions   where a batch takes its version
     * @param liveShapes the shapes of the versions served now (read without the models' monitors)
     */
    BatchRunner(RouterOptions options, ProcessWorkers processes, Versions versions,
                Supplier<Set<BatchAssembler.Shape>> liveShapes) {
        this.options = options;
        this.processes = processes;
        this.versions = versions;
        this.liveShapes = liveShapes;
        for (int i = 0; i < options.workers(); i++) {
            workerBuffers.add(new WorkerBuffers(new BatchAssembler(options.maxBatch())));
        }
    }

    /** {@return true when batches run in worker processes} */
    boolean inProcesses() {
        return processes != null;
    }

    /** {@return worker {@code i}'s batch buffers} */
    WorkerBuffers buffers(int i) {
        return workerBuffers.get(i);
    }

    /** Runs a batch, one version group after another (requests pinned to a version run on that version). */
    void runBatch(ServedModel m, List<QueuedRequest> batch, WorkerBuffers assembler) {
        long pinned = batch.get(0).pinned();
        boolean oneVersion = true;
        for (QueuedRequest r : batch) {
            oneVersion &= r.pinned() == pinned;
        }
        if (oneVersion) {
            runOn(m, pinned, batch, assembler);
        } else {
            Map<Long, List<QueuedRequest>> byVersion = new LinkedHashMap<>();
            for (QueuedRequest r : batch) {
                byVersion.computeIfAbsent(r.pinned(), v -> new ArrayList<>()).add(r);
            }
            byVersion.forEach((version, requests) -> runOn(m, version, requests, assembler));
        }
        sweep(assembler); // a sweep asked for while the batch held the buffers
    }

    private void runOn(ServedModel m, long version, List<QueuedRequest> requests, WorkerBuffers assembler) {
        ServedVersion served;
        try {
            served = versions.acquire(m, version);
        } catch (ServingException e) {
            requests.forEach(r -> m.fail(r, e));
            return;
        }
        if (processes != null) {
            runInProcess(m, served, requests, assembler);
            return;
        }
        INDArray out = null;
        try {
            out = run(m, served, requests, assembler);
        } catch (RuntimeException | Error e) { // a worker never dies with requests unanswered
            ServingException failure = new ServingException(Kind.FAILED, "model '" + m.name + "' version="
                    + served.version + ": " + e + " (fix: act on this cause, the model's own failure; when only this"
                    + " version fails, rollback(\"" + m.name + "\") serves the previous one)", e);
            requests.forEach(r -> m.fail(r, failure));
        } finally {
            // before any answer completes: a client that has its answer knows this worker has left the version (a
            // retired version is freed by then unless another reader holds it); the outputs are the batch's own
            served.release();
        }
        if (out != null) {
            answer(m, served.version, requests, out);
        }
    }

    /**
     * Sends the batch to a worker process and answers from its reply; the dispatch takes over {@code served}'s
     * reference (dropped when the worker has answered or exited), or this method drops it when nothing was sent.
     */
    private void runInProcess(ServedModel m, ServedVersion served, List<QueuedRequest> requests,
                              WorkerBuffers buffers) {
        ProcessWorkers.Dispatch sent;
        buffers.lock.lock(); // no sweep frees the buffer while the batch is encoded from it
        try {
            INDArray features = assemble(m, requests, buffers.assembler);
            sent = processes.submit(m.name, served, features); // copies the features into the message
            m.batchSize.record(features.size(0));
        } catch (ServingException e) {
            served.release();
            requests.forEach(r -> m.fail(r, e));
            return;
        } catch (RuntimeException e) {
            served.release();
            ServingException failure = new ServingException(Kind.FAILED, "model '" + m.name + "' version="
                    + served.version + ": the batch could not be sent to a worker process: " + e + " (fix: act on"
                    + " this cause)", e);
            requests.forEach(r -> m.fail(r, failure));
            return;
        } finally {
            buffers.lock.unlock();
            sweep(buffers);
        }
        INDArray out;
        try {
            out = sent.await(m.name, options.requestTimeout());
        } catch (ServingException e) {
            requests.forEach(r -> m.fail(r, e));
            return;
        }
        answer(m, served.version, requests, out); // the reply thread released the version before completing
    }

    /** The batch's outputs (the model's own array, no view of the weights), or null when it failed the requests. */
    private INDArray run(ServedModel m, ServedVersion served, List<QueuedRequest> requests, WorkerBuffers buffers) {
        INDArray out;
        ModelSpec.Network net = null;
        BatchAssembler assembler = buffers.assembler;
        buffers.lock.lock(); // no sweep frees the buffer while the batch uses it
        try {
            INDArray features = assemble(m, requests, assembler); // this thread's reused buffer: no concat
            net = served.borrow();
            out = assembler.detach(net.output(features)); // answers outlive the buffer's next batch
            m.batchSize.record(features.size(0));
        } catch (RuntimeException e) {
            ServingException failure = new ServingException(Kind.FAILED, "model '" + m.name + "' version="
                    + served.version + " failed on a batch of requests=" + requests.size() + ": " + e + " (fix: act on"
                    + " this cause, the model's own failure; when only this version fails, rollback(\"" + m.name
                    + "\") serves the previous one)", e);
            requests.forEach(r -> m.fail(r, failure));
            return null;
        } finally {
            buffers.lock.unlock();
            if (net != null) {
                served.giveBack(net);
            }
        }
        return out;
    }

    /** Records the requests' time in the queue and assembles their features; the caller holds the buffers' lock. */
    private static INDArray assemble(ServedModel m, List<QueuedRequest> requests, BatchAssembler assembler) {
        long start = System.nanoTime();
        long rows = 0;
        List<INDArray> all = new ArrayList<>(requests.size());
        for (QueuedRequest r : requests) {
            m.queued.record(start - r.arrivedNanos(), TimeUnit.NANOSECONDS);
            all.add(r.features());
            rows += r.rows();
        }
        return assembler.assemble(all, rows);
    }

    /** Completes each request's answer with its rows of the batch's outputs, computed by {@code version}. */
    private static void answer(ServedModel m, long version, List<QueuedRequest> requests, INDArray out) {
        long row = 0;
        for (QueuedRequest r : requests) {
            INDArray mine;
            if (requests.size() == 1) {
                mine = out;
            } else {
                INDArrayIndex[] idx = new INDArrayIndex[out.rank()];
                idx[0] = NDArrayIndex.interval(row, row + r.rows());
                for (int i = 1; i < idx.length; i++) {
                    idx[i] = NDArrayIndex.all();
                }
                mine = out.get(idx); // a view: the batch's output array is this batch's alone
            }
            row += r.rows();
            m.duration.record(System.nanoTime() - r.arrivedNanos(), TimeUnit.NANOSECONDS);
            if (r.claim()) {
                m.count("ok"); // before the answer: a caller who sees it sees it counted
                r.answer().complete(new Prediction(m.name, version, mine));
            }
        }
    }

    /** A version's shared memory was freed: every worker drops the buffers of shapes no served version has. */
    void versionFreed() {
        for (WorkerBuffers w : workerBuffers) {
            w.sweep = true; // before the try: a worker that holds the lock sees it when it lets go
            sweep(w);
        }
    }

    /**
     * Frees the worker's buffers of shapes no served version has, if it is asked to and its buffers are not in use;
     * every holder of the lock calls this after letting go, so no request is left behind while the lock is free.
     */
    private void sweep(WorkerBuffers w) {
        while (w.sweep && w.lock.tryLock()) {
            try {
                if (w.sweep) {
                    w.sweep = false;
                    w.assembler.retainOnly(liveShapes.get());
                }
            } finally {
                w.lock.unlock();
            }
        }
    }

    /** {@return the shapes the workers hold batch buffers for (waits for running batches)} */
    Set<BatchAssembler.Shape> batchBufferShapes() {
        Set<BatchAssembler.Shape> all = new HashSet<>();
        for (WorkerBuffers w : workerBuffers) {
            w.lock.lock();
            try {
                all.addAll(w.assembler.shapes());
            } finally {
                w.lock.unlock();
            }
        }
        return all;
    }
}
