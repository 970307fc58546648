package org.symmem4j.pipeline.exec;

import java.time.Duration;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.cuda.NvshmemTransport;
import org.symmem4j.parallel.cuda.WorkerProcesses;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One stage rank of {@link NvshmemPipelineExecutorTest}, a process of its own on a GPU of its own: the pipeline
 * executor told to put its links on the NVSHMEM transport ({@code PipelineExecutor.create(group, nvshmem, ...)}),
 * so every hand-off is NVSHMEM's put-with-signal and its on-stream wait, runs the copy pipeline of
 * {@link CudaPipelineExecutorTest} ({@link CopyPipeline}: 1F1B, interleaved, GPipe; every microbatch's bytes checked
 * where they arrive). No JUnit classes here: they are not on a rank process's class path.
 * Prints {@code NVSHMEM PIPELINE OK rank=R} and exits 0, or what went wrong and exits 3.
 */
public final class NvshmemPipelineWorker {

    private NvshmemPipelineWorker() {
    }

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> {
            try (NvshmemTransport nvshmem = NvshmemTransport.create();
                 ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults().withTimeout(Duration.ofSeconds(60)),
                         nvshmem)) {
                System.out.println("rank=" + group.rank() + " on " + nvshmem.describe(group));
                StringBuilder problems = new StringBuilder();
                for (CopyPipeline.Case c : CopyPipeline.cases(group.worldSize())) {
                    String found = CopyPipeline.run(group, nvshmem, c.name(), c.shape(), c.schedule(), 3);
                    System.out.println(c.name() + ": " + (found.isEmpty() ? "every microbatch intact over NVSHMEM links" : found));
                    problems.append(found);
                }
                nvshmem.release(group);
                if (!problems.isEmpty()) {
                    throw new AssertionError(problems.toString());
                }
                return "NVSHMEM PIPELINE OK rank=" + group.rank();
            }
        });
    }
}
