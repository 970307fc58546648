package org.symmem4j.serving;

import java.util.concurrent.CompletableFuture;

import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * One request waiting in a {@link ServedModel}'s queue for a batch of {@link ModelRouter}.
 *
 * @param features     the rows to run, already in the model's data type
 * @param rows         how many rows {@code features} has
 * @param pinned       the version asked for, or 0 for the current one when the batch forms
 * @param answer       completed with the request's rows of the batch's outputs, or failed
 * @param arrivedNanos when {@link ModelRouter#predict} took it ({@link System#nanoTime})
 */
record QueuedRequest(INDArray features, long rows, long pinned, CompletableFuture<Prediction> answer,
                     long arrivedNanos) {
}
