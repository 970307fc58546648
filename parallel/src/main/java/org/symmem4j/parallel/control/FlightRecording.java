package org.symmem4j.parallel.control;

import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.Configuration;

/**
 * Turns one rank's flight recorder ({@link FlightRecorder}) of one communicator off and on again between collectives,
 * without making a new communicator: for benchmarks that measure what the recorder costs on one communicator, whose
 * scratch memory and threads stay where they are, by alternating blocks of collectives with and without it
 * ({@code FlightRecorderPairedBenchmark}). Two communicators, or two JVMs, differ in their memory's placement by more
 * than the recorder costs.
 *
 * <p>Reached through {@link Communicator#unwrap Communicator.unwrap(FlightRecording.class)}: empty for a communicator
 * made without a recorder ({@link Configuration#FLIGHT_RECORDER_ENTRIES} 0), which this switch cannot add. Not an
 * application setting: applications turn the recorder off with that setting. The switch is the control plane's
 * reference to its recorder, which the hot path reads anyway (once per check, null meaning off): it adds nothing to a
 * collective, on or off.
 *
 * <p>Each rank switches its own communicator, on the thread that runs its collectives, between two of them (the
 * reference is a plain field). Ranks may differ: each rank's recorder is its own. After recording resumes, the dumps
 * and {@link FlightRecorder#lastOps} hold only the collectives since (those during the pause were not recorded).
 */
public interface FlightRecording {

    /** {@return whether this rank records its collectives now} */
    boolean isRecording();

    /**
     * Records this rank's next collectives, or stops recording them.
     *
     * @param on true to record
     */
    void setRecording(boolean on);

    /**
     * {@return where this rank's recorder storage, signal pads and data lie}, one line for a benchmark's log: the
     * addresses of the recorder's off-heap storage ({@link FlightRecorderLayout}), of every rank's signal pad as mapped
     * here and of every rank's data region of the communicator's memory, each with its offset in a 4 KiB page and in a
     * 64-byte line, so that a slow fork can be held against where its memory fell (issue #36).
     */
    String placement();
}
