package org.symmem4j.dl4j.tensor;

import org.symmem4j.dl4j.nd4j.ArrayCollectives;

/**
 * A layer implementation bound to a tensor-parallel group ({@link TensorParallel#attach}): the column- and row-parallel
 * dense layers and the vocabulary-parallel output layer.
 */
interface TensorParallelLayer {

    /** Binds the layer to its group's communicator (every rank's network to its own rank's), or unbinds it (null). */
    void attach(ArrayCollectives comm);

    /** The communicator attached, or null. */
    ArrayCollectives comm();

    /**
     * The group's communicator, or a clear error naming {@code layer} when the network was not attached (a clone, or a
     * fresh network).
     */
    default ArrayCollectives requireComm(String layer) {
        ArrayCollectives comm = comm();
        if (comm == null) {
            throw new IllegalStateException("tensor-parallel layer " + layer + " has no group (fix: call"
                    + " TensorParallel.attach(network, communicator) on every rank before training or output (a network"
                    + " built, loaded or cloned afresh needs it again))");
        }
        return comm;
    }
}
