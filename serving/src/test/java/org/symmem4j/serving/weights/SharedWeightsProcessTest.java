package org.symmem4j.serving.weights;

import java.nio.file.Files;
import java.nio.file.Path;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.cuda.WorkerProcesses;

/** Worker processes on one host run networks over the owner's one copy of the weights (/dev/shm). */
class SharedWeightsProcessTest {

    @Test
    void workerProcessesAnswerBitwiseFromTheOwnersWeights(@TempDir Path logs) throws Exception {
        WorkerProcesses.runAndCheck(SharedWeightsProcessWorker.class, 3, "WEIGHTS OK", Files.createDirectories(logs), 180);
    }
}
