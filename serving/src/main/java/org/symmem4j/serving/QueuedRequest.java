package org.symmem4j.serving;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * One request waiting in a {@link ServedModel}'s queue for a batch of {@link ModelRouter}.
 *
 * <p>Whoever settles the request (a worker with its rows, a failure, the request timeout) first wins {@link #claim},
 * then counts the outcome, then completes {@code answer}: a caller who sees the answer also sees it counted.
 *
 * @param features     the rows to run, already in the model's data type
 * @param rows         how many rows {@code features} has
 * @param pinned       the version asked for, or 0 for the current one when the batch forms
 * @param answer       completed with the request's rows of the batch's outputs, or failed
 * @param arrivedNanos when {@link ModelRouter#predict} took it ({@link System#nanoTime})
 * @param claimed      set by the one that settles the request
 */
record QueuedRequest(INDArray features, long rows, long pinned, CompletableFuture<Prediction> answer,
                     long arrivedNanos, AtomicBoolean claimed) {

    /** {@return true for the one caller that may count and complete this request's answer} */
    boolean claim() {
        return claimed.compareAndSet(false, true);
    }
}
