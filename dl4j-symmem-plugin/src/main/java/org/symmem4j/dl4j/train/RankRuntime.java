package org.symmem4j.dl4j.train;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Predicate;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.affinity.RankAffinity;

/**
 * One rank of a trainer run by a thread of its own: a named daemon thread that opens the rank, completes
 * {@link #ready()}, then runs the tasks it is given one at a time until a shutdown task, and closes the rank in a
 * {@code finally} block. Every trainer's worker (data-parallel, pipeline) extends it with what opening, a step and
 * closing mean for it.
 *
 * <p>Closing is collective for the trainers (a rank's close meets its peers'): the trainer sends every rank its
 * shutdown task in the same round, failed or not, and then {@link #join()}s the threads.
 *
 * @param <T> the trainer's task (one step, or the shutdown task)
 */
public abstract class RankRuntime<T> {

    /** What a rank's thread does after a failed task. */
    public enum AfterFailure {
        /** The thread closes the rank and ends: the trainer rebuilds its ranks (data parallelism). */
        STOP,
        /** The thread waits for its shutdown task, which the trainer sends every rank after a failure (pipeline). */
        CONTINUE_UNTIL_SHUTDOWN
    }

    private final Predicate<T> shutdown;
    private final AfterFailure afterFailure;
    private final BlockingQueue<T> tasks = new LinkedBlockingQueue<>();
    private final CompletableFuture<Void> ready = new CompletableFuture<>();
    private final Thread thread;
    /** Set before {@link #start()} (the thread's start publishes it): the pinning and this rank's index in it. */
    private RankAffinity affinity = RankAffinity.OFF;
    private int affinityIndex;

    /**
     * @param threadName   the thread's name
     * @param shutdown     whether a task is the shutdown task
     * @param afterFailure what the thread does after a failed task
     */
    protected RankRuntime(String threadName, Predicate<T> shutdown, AfterFailure afterFailure) {
        this.shutdown = shutdown;
        this.afterFailure = afterFailure;
        this.thread = Thread.ofPlatform().daemon().name(threadName).unstarted(this::run);
    }

    /**
     * Before {@link #start()}: the thread pins itself to rank {@code index}'s CPU of {@code affinity} before it opens
     * the rank (thread mode; a rank of a process group is pinned with its whole process).
     *
     * @param affinity the pinning of this machine's ranks, made before any rank starts
     * @param index    this rank's index in it
     */
    public final void pinTo(RankAffinity affinity, int index) {
        this.affinity = affinity;
        this.affinityIndex = index;
    }

    /** Starts the rank's thread, which opens the rank. */
    public final void start() {
        thread.start();
    }

    /** Completes when the rank opened; completes exceptionally with the cause if it could not. */
    public final CompletableFuture<Void> ready() {
        return ready;
    }

    /** Queues a task for the rank's thread (a step, or the shutdown task). */
    public final void submit(T task) {
        tasks.add(task);
    }

    /** Waits for the rank's thread to end (after its shutdown task, a failed step with {@link AfterFailure#STOP}, or a failed open). */
    public final void join() throws InterruptedException {
        thread.join();
    }

    /** On the rank's thread: opens the rank (joins its group, sets up its resources); {@link #ready()} completes when it returns. */
    protected abstract void open();

    /**
     * On the rank's thread: frees what a failed {@link #open()} left; called once, after {@link #ready()} completed
     * with {@code cause}. The thread then ends (no task runs, and {@link #close()} is not called).
     */
    protected abstract void openFailed(Throwable cause);

    /**
     * On the rank's thread: runs one task and completes its result; returns false if it failed (its result then
     * holds the cause). A failure belongs in the task's result; what escapes ends the thread (after {@link #close()}).
     */
    protected abstract boolean step(T task);

    /** On the rank's thread: closes the rank after its last task (collective); never throws. */
    protected abstract void close();

    private void run() {
        try {
            affinity.pinCurrentThread(affinityIndex);
            open();
            ready.complete(null);
        } catch (Throwable t) {
            ready.completeExceptionally(t);
            openFailed(t);
            return;
        }
        try {
            while (true) {
                T task = tasks.take();
                if (shutdown.test(task)) {
                    break;
                }
                if (!step(task) && afterFailure == AfterFailure.STOP) {
                    break;
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            close();
        }
    }

    /**
     * Starts every rank's thread and waits until every rank opened: at most {@code timeout} (the bound of every wait
     * inside an open) and 10 s more. When a rank fails to open, or the wait ends first, {@code stop} stops the ranks
     * (a collective close meets the peers that opened) before the failure is thrown.
     *
     * @param ranks   this process's ranks, not started yet
     * @param timeout the trainer's bound of every wait for another rank
     * @param what    the ranks, as the failure names them ("data-parallel workers", "pipeline ranks")
     * @param stop    stops the ranks after a failed start
     * @throws SymmemException "{@code <what> failed to start: <why>}" with the first failure as its cause, or
     *                         "{@code interrupted while starting <what>}" (the thread's interrupt flag set again)
     */
    public static void startAll(List<? extends RankRuntime<?>> ranks, Duration timeout, String what, Runnable stop) {
        for (RankRuntime<?> rank : ranks) {
            rank.start();
        }
        try {
            CompletableFuture.allOf(ranks.stream().map(RankRuntime::ready).toArray(CompletableFuture[]::new))
                    .get(timeout.toMillis() + 10_000, TimeUnit.MILLISECONDS);
        } catch (ExecutionException | TimeoutException e) {
            stop.run();
            throw new SymmemException(what + " failed to start: " + e.getMessage() + " (fix: correct what the cause"
                    + " names; after a timeout, check that every rank was started and is reachable, or raise the group"
                    + " timeout with -Dsymmem4j.timeout.ms)",
                    e instanceof ExecutionException ? e.getCause() : e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            stop.run();
            throw new SymmemException("interrupted while starting " + what + ": expected the start to finish (fix: do"
                    + " not interrupt the thread that builds the trainer)", e);
        }
    }

    /** Closes {@code c} if not null, ignoring what it throws (shutting down, possibly after a failure: peers may be gone). */
    public static void closeQuietly(AutoCloseable c) {
        if (c == null) {
            return;
        }
        try {
            c.close();
        } catch (Exception ignored) {
            // shutting down, possibly after a failure: peers may be gone
        }
    }
}
