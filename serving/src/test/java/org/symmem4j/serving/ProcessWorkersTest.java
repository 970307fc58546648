package org.symmem4j.serving;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.cuda.WorkerProcesses;

/**
 * A router JVM and two worker JVMs fed through ring buffers: bitwise answers from both workers, a hot swap while
 * requests flow, and a worker killed with batches in flight (see {@link ProcessWorkersMain}).
 */
class ProcessWorkersTest {

    @Test
    void workerProcessesAnswerBitwiseSurviveAHotSwapAndOneWorkersDeath(@TempDir Path dir) throws Exception {
        Path logs = Files.createDirectories(dir.resolve("logs"));
        WorkerProcesses.runAndCheck(ProcessWorkersMain.class, 3, "SERVING OK", logs, 240, Set.of(2),
                dir.resolve("kill-rank-2").toString());
    }
}
