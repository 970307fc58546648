package org.symmem4j.serving;

import java.time.Duration;
import java.util.Objects;

/**
 * The router's settings.
 *
 * @param workers        threads that run batches (each batch on one network object over the shared weights); a free
 *                       worker takes the queued requests of a model (up to {@code maxBatch} rows) as one batch
 * @param maxBatch       most rows in one batch
 * @param maxWait        longest a worker that found fewer than {@code maxBatch} rows queued waits, after the first
 *                       request arrived, for more to join; 0 starts the batch at once (batches still grow under load,
 *                       from the requests that queue while the workers are busy), a positive wait trades latency at
 *                       low load for larger batches
 * @param queueCapacity  requests a model's queue holds; a request beyond it is refused as overloaded
 * @param requestTimeout longest a request waits for its answer before it fails with a timeout
 */
public record RouterOptions(int workers, int maxBatch, Duration maxWait, int queueCapacity, Duration requestTimeout) {

    /** Checks the settings. */
    public RouterOptions {
        Objects.requireNonNull(maxWait, "maxWait");
        Objects.requireNonNull(requestTimeout, "requestTimeout");
        if (workers < 1 || maxBatch < 1 || queueCapacity < 1 || maxWait.isNegative() || requestTimeout.isNegative()
                || requestTimeout.isZero()) {
            throw new IllegalArgumentException("router options workers=" + workers + " maxBatch=" + maxBatch
                    + " queueCapacity=" + queueCapacity + " maxWait=" + maxWait + " requestTimeout=" + requestTimeout
                    + " expected workers, maxBatch, queueCapacity >= 1, maxWait >= 0 and requestTimeout > 0"
                    + " (fix: pass values in those ranges, or start from RouterOptions.defaults())");
        }
    }

    /** {@return 2 workers, batches of up to 32 rows, no wait, 1024 queued requests, 10 s timeout} */
    public static RouterOptions defaults() {
        return new RouterOptions(2, 32, Duration.ZERO, 1024, Duration.ofSeconds(10));
    }

    /** @param n workers @return a copy with that many workers */
    public RouterOptions withWorkers(int n) {
        return new RouterOptions(n, maxBatch, maxWait, queueCapacity, requestTimeout);
    }

    /** @param rows most rows per batch @param wait longest wait @return a copy with that batching */
    public RouterOptions withBatching(int rows, Duration wait) {
        return new RouterOptions(workers, rows, wait, queueCapacity, requestTimeout);
    }

    /** @param capacity requests a queue holds @return a copy with that capacity */
    public RouterOptions withQueueCapacity(int capacity) {
        return new RouterOptions(workers, maxBatch, maxWait, capacity, requestTimeout);
    }

    /** @param timeout longest wait for an answer @return a copy with that timeout */
    public RouterOptions withRequestTimeout(Duration timeout) {
        return new RouterOptions(workers, maxBatch, maxWait, queueCapacity, timeout);
    }
}
