package org.symmem4j.dl4j.tensor;

import org.symmem4j.dl4j.ArrayCollectives;

/**
 * A layer implementation bound to a tensor-parallel group ({@link TensorParallel#attach}): the column- and row-parallel
 * dense layers and the vocabulary-parallel output layer.
 */
interface TensorParallelLayer {

    /** Binds the layer to its group's communicator (every rank's network to its own rank's), or unbinds it (null). */
    void attach(ArrayCollectives comm);

    /** The communicator attached, or null. */
    ArrayCollectives comm();
}
