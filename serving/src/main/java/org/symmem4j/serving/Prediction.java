package org.symmem4j.serving;

import org.nd4j.linalg.api.ndarray.INDArray;

/**
 * A request's answer: the network's output for the request's rows, and the one version that computed all of it.
 *
 * @param model   the model's name
 * @param version the version that answered
 * @param output  the output rows, one per input row
 */
public record Prediction(String model, long version, INDArray output) {
}
