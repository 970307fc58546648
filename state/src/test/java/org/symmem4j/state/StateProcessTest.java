package org.symmem4j.state;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.cuda.WorkerProcesses;

/** The shared-state structures between JVM processes over /dev/shm, with a rank killed mid-write. */
class StateProcessTest {

    @Test
    void ringProducerKilledMidWriteNeverExposesATornMessage(@TempDir Path logs) throws Exception {
        WorkerProcesses.runAndCheck(StateProcessWorker.class, 3, "STATE OK", Files.createDirectories(logs), 90,
                Set.of(1), "ring-killed-producer");
    }

    @Test
    void mapWriterKilledHoldingASlotLeavesNoValidSlot(@TempDir Path logs) throws Exception {
        WorkerProcesses.runAndCheck(StateProcessWorker.class, 3, "STATE OK", Files.createDirectories(logs), 90,
                Set.of(2), "map-killed-writer");
    }

    @Test
    void aProducerProcessThatFailsInsideTheRingsTryEndsTheConsumersTakeAtOnce(@TempDir Path logs) throws Exception {
        WorkerProcesses.runAndCheck(StateProcessWorker.class, 2, "STATE OK", Files.createDirectories(logs), 90,
                "ring-producer-fails");
    }
}
