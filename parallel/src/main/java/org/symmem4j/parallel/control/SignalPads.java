package org.symmem4j.parallel.control;

/**
 * Symmetric memory in host RAM whose signal pads a {@link PadSynchronizer} drives: what a
 * {@link ControlPlane} runs on. The host transports' memory implements it; device memory, whose pads
 * Java code cannot touch, does not.
 */
public interface SignalPads {

    /**
     * The synchronizer over every rank's signal pad of this memory, one per memory and rank.
     *
     * @return this rank's synchronizer of this memory
     */
    PadSynchronizer sync();
}
