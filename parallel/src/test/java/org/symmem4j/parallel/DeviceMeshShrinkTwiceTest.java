package org.symmem4j.parallel;

import java.nio.file.Path;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.cuda.WorkerProcesses;

/**
 * Two successive in-place shrinks of one {@code dp x tp} mesh ({@link DeviceMesh#shrink(String)} on the mesh a first
 * shrink formed), host only: six processes under the launcher's part of {@code --on-failure shrink}
 * ({@link WorkerProcesses#runWithShrink}), {@code dp 3 x tp 2 -> dp 2 x tp 2 -> dp 1 x tp 2}, a rank killed by SIGKILL
 * before each shrink and its tp peer leaving; {@link DeviceMeshShrinkTwiceWorker} checks each shrink's report and the
 * survivors' groups.
 */
class DeviceMeshShrinkTwiceTest {

    @Test
    void aShrunkMeshShrinksAgainAfterASecondDeath(@TempDir Path logs) throws Exception {
        WorkerProcesses.runWithShrink(DeviceMeshShrinkTwiceWorker.class, 6, "MESH OK", logs, 180, Set.of(1, 4));
    }
}
