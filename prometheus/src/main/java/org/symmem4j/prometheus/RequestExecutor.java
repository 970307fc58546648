package org.symmem4j.prometheus;

import com.sun.net.httpserver.Filter;
import com.sun.net.httpserver.HttpExchange;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The executor of a {@link PrometheusEndpoint}'s JDK HTTP server: every exchange on a virtual thread of
 * its own, at most {@code maxRequests} at once, none longer than a deadline.
 *
 * <p><b>Why a thread per exchange.</b> The JDK server ({@code sun.net.httpserver.ServerImpl}) hands a
 * connection to its executor when the connection's first byte arrives, and the executor's task reads the
 * request line and headers with blocking reads ({@code ServerImpl.Exchange.run} → {@code new Request(..)},
 * {@code Request.headers()}). On a fixed pool a client that sends half a request holds a pool thread until
 * it finishes or is dropped, so a few such clients stall every scrape. Here a half-sent request parks only
 * its own virtual thread (a blocking channel read on a virtual thread unmounts it), and a scrape that
 * arrives next gets a thread of its own at once.
 *
 * <p><b>Deadline.</b> No exchange runs longer than the deadline, from its first byte to the last byte of
 * its response: then its thread is interrupted, and an interrupt closes the blocking channel it reads or
 * writes ({@code ClosedByInterruptException}), so the exchange fails and the server drops its connection.
 *
 * <p><b>Cap with eviction.</b> At most {@code maxRequests} exchanges hold memory at once: one more evicts
 * the oldest exchange still reading its request head (failing that, the oldest of all), the same way as
 * the deadline. Refusing the newcomer instead would let whoever holds the cap stall every scrape; a real
 * scraper's request head arrives in one segment and is read at once, so eviction lands on stalled clients.
 * {@link #headReadFilter()} tells which exchanges have read their head: the JDK server runs a context's
 * filters after the head is parsed, on the exchange's own thread.
 *
 * <p>An exchange stopped (by deadline, eviction or {@link #close()}) before its thread starts runs with its
 * interrupt already set: its first channel operation fails and the server closes the connection. Each
 * virtual thread runs one exchange, so an interrupt never reaches another.
 */
final class RequestExecutor implements Executor {

    private final String name;
    private final int maxRequests;
    private final long deadlineNanos;
    private final ThreadFactory threads;
    private final ScheduledThreadPoolExecutor watchdog;
    /** The exchange the current (virtual) thread runs, for {@link #headReadFilter()}. */
    private static final ScopedValue<Exchange> CURRENT = ScopedValue.newInstance();
    private final Object lock = new Object();
    /** Exchanges started and not finished nor stopped, oldest first. Guarded by {@link #lock}. */
    private final LinkedHashSet<Exchange> inFlight = new LinkedHashSet<>();
    /** Guarded by {@link #lock}. */
    private boolean closed;
    private final AtomicLong timedOut = new AtomicLong();
    private final AtomicLong evicted = new AtomicLong();

    /**
     * @param name        thread name prefix
     * @param maxRequests exchanges in flight at once; one more evicts the oldest
     * @param deadline    the longest an exchange may run before its thread is interrupted
     */
    RequestExecutor(String name, int maxRequests, Duration deadline) {
        this.name = name;
        this.maxRequests = maxRequests;
        this.deadlineNanos = deadline.toNanos();
        this.threads = Thread.ofVirtual().name(name + "-", 0).factory();
        this.watchdog = new ScheduledThreadPoolExecutor(1,
                r -> Thread.ofPlatform().daemon().name(name + "-watchdog").unstarted(r));
        watchdog.setRemoveOnCancelPolicy(true); // a finished exchange's deadline does not linger in the timer queue
    }

    /**
     * Runs one exchange of the JDK server on a new virtual thread. Called by the server's dispatcher thread;
     * never blocks.
     *
     * @throws RejectedExecutionException after {@link #close()} (the server then closes the connection)
     */
    @Override
    public void execute(Runnable task) {
        Exchange exchange = new Exchange(task);
        Exchange victim = null;
        synchronized (lock) {
            if (closed) {
                // error-message: only the JDK server's dispatcher calls execute, and close() stops it first
                throw new RejectedExecutionException("metrics endpoint " + name + " is closed");
            }
            inFlight.add(exchange);
            if (inFlight.size() > maxRequests) {
                victim = oldestToEvict(exchange);
                inFlight.remove(victim);
            }
        }
        exchange.deadline = watchdog.schedule(() -> exchange.stop(timedOut), deadlineNanos, TimeUnit.NANOSECONDS);
        threads.newThread(exchange).start();
        if (victim != null) {
            victim.stop(evicted);
        }
    }

    /** The oldest exchange still reading its request head, else the oldest; never the newcomer. */
    private Exchange oldestToEvict(Exchange newcomer) {
        Exchange oldest = null;
        for (Exchange e : inFlight) { // oldest first; the newcomer is last
            if (e == newcomer) {
                break;
            }
            if (oldest == null) {
                oldest = e;
            }
            if (!e.headRead) {
                return e;
            }
        }
        return oldest; // not null: more than maxRequests >= 1 are in flight, the newcomer among them
    }

    /**
     * A filter to add to every context of the server: marks the running exchange as past its request head,
     * so that the cap evicts it only after every exchange still reading one.
     *
     * @return the filter
     */
    Filter headReadFilter() {
        return new Filter() {
            @Override
            public void doFilter(HttpExchange http, Chain chain) throws IOException {
                if (CURRENT.isBound()) {
                    CURRENT.get().headRead = true;
                }
                chain.doFilter(http);
            }

            @Override
            public String description() {
                return "marks the exchange's request head as read (PrometheusEndpoint's eviction order)";
            }
        };
    }

    /** Exchanges stopped at the deadline. */
    long timedOut() {
        return timedOut.get();
    }

    /** Exchanges stopped because {@code maxRequests} newer ones arrived. */
    long evicted() {
        return evicted.get();
    }

    /** Exchanges started and neither finished nor stopped. */
    int inFlight() {
        synchronized (lock) {
            return inFlight.size();
        }
    }

    /** Refuses new exchanges, stops the running ones (their threads are interrupted) and the watchdog. */
    void close() {
        List<Exchange> running;
        synchronized (lock) {
            closed = true;
            running = new ArrayList<>(inFlight);
            inFlight.clear();
        }
        for (Exchange e : running) {
            e.stop(null);
        }
        watchdog.shutdownNow();
    }

    /** One exchange: the JDK server's task, its thread once started, and whether it was stopped. */
    private final class Exchange implements Runnable {
        private final Runnable task;
        /** Written by {@link #execute} before {@code Thread.start()}, which publishes it to the exchange's thread. */
        private ScheduledFuture<?> deadline;
        /**
         * Volatile: the exchange's thread writes it (the filter) and the dispatcher reads it when it picks a victim,
         * with no lock in common. A stale false only makes eviction pick this exchange a little early.
         */
        private volatile boolean headRead;
        /** Guarded by this. */
        private Thread thread;
        /** Guarded by this. */
        private boolean stopped;
        /** Guarded by this. */
        private boolean finished;

        Exchange(Runnable task) {
            this.task = task;
        }

        @Override
        public void run() {
            synchronized (this) {
                thread = Thread.currentThread();
                if (stopped) {
                    thread.interrupt(); // stopped before it started: its first channel operation fails
                }
            }
            try {
                ScopedValue.where(CURRENT, this).run(task);
            } finally {
                synchronized (this) {
                    finished = true;
                }
                deadline.cancel(false);
                synchronized (lock) {
                    inFlight.remove(this);
                }
            }
        }

        /**
         * Stops the exchange unless it finished or was stopped before: counts it in {@code reason} (before the
         * client can see its connection closed), then interrupts its thread if running, else makes it start
         * interrupted.
         *
         * @param reason the counter of this kind of stop, or null
         */
        void stop(AtomicLong reason) {
            synchronized (this) {
                if (finished || stopped) {
                    return;
                }
                stopped = true;
                if (reason != null) {
                    reason.incrementAndGet();
                }
                if (thread != null) {
                    thread.interrupt();
                }
            }
            synchronized (lock) {
                inFlight.remove(this);
            }
        }
    }
}
