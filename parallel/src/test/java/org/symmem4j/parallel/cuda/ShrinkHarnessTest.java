package org.symmem4j.parallel.cuda;

import java.nio.file.Path;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The launcher's part that {@link CudaShrinkTest} plays ({@link WorkerProcesses#runWithShrink}), checked where there is
 * no GPU: three processes on the host transport, rank 1 killed by SIGKILL, announced in the membership file, and the
 * two survivors shrink into a group of 2 renumbered in their old order. So the GPU test's harness is known to work
 * before its one run on a GPU.
 */
class ShrinkHarnessTest {

    @Test
    void theHarnessAnnouncesAKilledRankAndTheSurvivorsShrink(@TempDir Path logs) throws Exception {
        WorkerProcesses.runWithShrink(ShrinkHarnessWorker.class, 3, "HARNESS OK", logs, 120, Set.of(1), "1");
    }
}
