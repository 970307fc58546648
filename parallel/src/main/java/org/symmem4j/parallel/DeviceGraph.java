package org.symmem4j.parallel;

/**
 * Work captured from a rank's stream by {@link DeviceCommunicator#capture}, replayed with one launch.
 */
public interface DeviceGraph extends AutoCloseable {

    /** Enqueues the captured work once more on the rank's stream. */
    void replay();

    /** Destroys the graph. */
    @Override
    void close();
}
