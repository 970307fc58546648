package org.symmem4j.dl4j.tensor;

/** A layer implementation that communicates over the tensor-parallel group {@link TensorParallel#attach} gave it. */
interface TensorParallelLayer {

    /** Binds the layer to its group's communicator (every rank's network to its own rank's). */
    void attach(TensorParallelComm comm);

    /** The communicator attached, or null. */
    TensorParallelComm comm();

    /** The communicator, or a clear error when the network was not attached (a clone, or a fresh network). */
    static TensorParallelComm require(TensorParallelComm comm, String layerId) {
        if (comm == null) {
            throw new IllegalStateException("tensor-parallel layer " + layerId + " has no group: call"
                    + " TensorParallel.attach(network, communicator) on every rank before training or output (a network"
                    + " built, loaded or cloned afresh needs it again)");
        }
        return comm;
    }
}
