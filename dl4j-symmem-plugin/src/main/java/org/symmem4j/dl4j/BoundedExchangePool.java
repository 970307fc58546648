package org.symmem4j.dl4j;

import java.time.Duration;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The request threads of a {@link PrometheusEndpoint}: a fixed pool of daemon threads with a bounded
 * queue that refuses work beyond it ({@link ThreadPoolExecutor.AbortPolicy}; the JDK HTTP server
 * answers a refused exchange by closing its connection), and where no task runs past a deadline.
 *
 * <p>At the deadline a watchdog interrupts the task's thread. The JDK HTTP server reads requests and
 * writes responses with blocking {@code SocketChannel} calls, which an interrupt ends by closing the
 * channel ({@code ClosedByInterruptException}): the exchange fails, the server drops the connection
 * and the thread is free. A client that sent half a request, or stopped reading the response,
 * holds a thread for at most the deadline.
 *
 * <p>Interrupt hygiene: the watchdog interrupts only while the task it timed is still running (both
 * sides decide under the task's {@link Deadline} lock), and a task that was interrupted clears the
 * flag when it ends, so an interrupt never reaches the thread's next task.
 */
final class BoundedExchangePool extends ThreadPoolExecutor {

    private final ScheduledThreadPoolExecutor watchdog;
    private final long deadlineNanos;
    private final ThreadLocal<Deadline> running = new ThreadLocal<>();
    private final AtomicLong timedOut = new AtomicLong();

    /**
     * @param threads  tasks run at once
     * @param queued   tasks waiting for a thread; one more is refused
     * @param deadline the longest a task may run before its thread is interrupted
     */
    BoundedExchangePool(String name, int threads, int queued, Duration deadline) {
        super(threads, threads, 30, TimeUnit.SECONDS, queue(queued), daemonThreads(name), new AbortPolicy());
        allowCoreThreadTimeOut(true); // idle endpoints hold no threads
        this.deadlineNanos = deadline.toNanos();
        this.watchdog = new ScheduledThreadPoolExecutor(1, daemonThreads(name + "-watchdog"));
        watchdog.setRemoveOnCancelPolicy(true); // a cancelled deadline does not linger in the timer queue
    }

    private static BlockingQueue<Runnable> queue(int queued) {
        return queued == 0 ? new SynchronousQueue<>() : new ArrayBlockingQueue<>(queued);
    }

    private static ThreadFactory daemonThreads(String name) {
        AtomicInteger next = new AtomicInteger();
        return r -> Thread.ofPlatform().daemon().name(name + "-" + next.getAndIncrement()).unstarted(r);
    }

    /** Tasks whose thread was interrupted at the deadline. */
    long timedOut() {
        return timedOut.get();
    }

    @Override
    protected void beforeExecute(Thread thread, Runnable task) {
        Deadline d = new Deadline(thread);
        d.timer = watchdog.schedule(d::expire, deadlineNanos, TimeUnit.NANOSECONDS);
        running.set(d);
    }

    @Override
    protected void afterExecute(Runnable task, Throwable failure) {
        Deadline d = running.get();
        running.remove();
        d.finish();
    }

    @Override
    protected void terminated() {
        watchdog.shutdownNow();
    }

    /** One running task's deadline. */
    private final class Deadline {
        private final Thread thread;
        /** Set and read by the task's own thread only. */
        private ScheduledFuture<?> timer;
        private boolean finished;
        private boolean expired;

        Deadline(Thread thread) {
            this.thread = thread;
        }

        /** On the watchdog thread: interrupts the task if it is still running. */
        synchronized void expire() {
            if (!finished) {
                expired = true;
                timedOut.incrementAndGet();
                thread.interrupt();
            }
        }

        /** On the task's thread, after the task: no interrupt can come any more, and none is left set. */
        void finish() {
            timer.cancel(false);
            synchronized (this) {
                finished = true;
                if (expired) {
                    Thread.interrupted(); // clear ours, so the thread's next task starts clean
                }
            }
        }
    }
}
