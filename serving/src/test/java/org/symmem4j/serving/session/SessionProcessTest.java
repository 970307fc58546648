package org.symmem4j.serving.session;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.cuda.WorkerProcesses;

/** The session cache between JVM processes over /dev/shm: any process continues any session; a killed writer. */
class SessionProcessTest {

    @Test
    void sessionsAlternatingBetweenTwoProcessesMatchOneNetworkBitwise(@TempDir Path logs) throws Exception {
        WorkerProcesses.runAndCheck(SessionProcessWorker.class, 2, "SESSION OK", Files.createDirectories(logs), 120,
                "alternate");
    }

    @Test
    void aWriterKilledMidWriteLeavesNoReadableState(@TempDir Path logs) throws Exception {
        WorkerProcesses.runAndCheck(SessionProcessWorker.class, 2, "SESSION OK", Files.createDirectories(logs), 120,
                Set.of(1), "killed-writer");
    }
}
