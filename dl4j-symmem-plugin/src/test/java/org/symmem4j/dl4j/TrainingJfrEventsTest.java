package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordingFile;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;

/**
 * The data-parallel wrapper's JFR events, read back with {@code jdk.jfr.consumer}: one
 * {@code symmem4j.TrainingStep} per worker per step whose compute, sync and wait agree with the step
 * reports, and one {@code symmem4j.Checkpoint} per checkpoint with the bytes of the files it wrote.
 */
class TrainingJfrEventsTest {

    @Test
    void stepsAndCheckpointsAreJfrEventsWhileARecordingEnablesThem(@TempDir Path dir) throws Exception {
        List<DataSet> data = new ArrayList<>(Nets.batches(31, 5, 8, DataType.FLOAT));
        data.set(4, Nets.batches(32, 1, 5, DataType.FLOAT).getFirst()); // the last step: worker 1 idle
        List<StepReport> reports = new ArrayList<>();
        Path checkpoints = dir.resolve("checkpoints");
        Path file = dir.resolve("training.jfr");
        try (Recording recording = new Recording()) {
            recording.enable("symmem4j.TrainingStep").withThreshold(Duration.ZERO);
            recording.enable("symmem4j.Checkpoint").withThreshold(Duration.ZERO);
            recording.start();
            try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(Nets.mlp(Nets.updater("adam"), DataType.FLOAT))
                    .workers(2).stepListener(reports::add).checkpointEvery(2, checkpoints).build()) {
                wrapper.fit(new BatchListIterator(data));
            }
            recording.stop();
            recording.dump(file);
        }
        assertEquals(3, reports.size(), "5 batches on 2 workers");
        List<RecordedEvent> all = RecordingFile.readAllEvents(file);
        Map<String, RecordedEvent> steps = new TreeMap<>();
        for (RecordedEvent e : all) {
            if (e.getEventType().getName().equals("symmem4j.TrainingStep")) {
                assertEquals(null, steps.put(e.getLong("step") + "/" + e.getInt("worker"), e), "one event per worker per step");
            }
        }
        assertEquals(List.of("0/0", "0/1", "1/0", "1/1", "2/0", "2/1"), new ArrayList<>(steps.keySet()));
        for (int step = 0; step < 3; step++) {
            long examples = 0;
            long longestSync = 0;
            long shortestWait = Long.MAX_VALUE;
            for (int worker = 0; worker < 2; worker++) {
                RecordedEvent e = steps.get(step + "/" + worker);
                examples += e.getLong("examples");
                long compute = e.getDuration("compute").toNanos();
                long sync = e.getDuration("sync").toNanos();
                long wait = e.getDuration("waitForPeers").toNanos();
                assertTrue(compute > 0, "compute of " + step + "/" + worker);
                assertTrue(sync > 0 && wait >= 0 && wait <= e.getDuration().toNanos(), e.toString());
                assertTrue(compute + sync <= e.getDuration().toNanos(), "the worker's part lies within the caller's step: " + e);
                assertFalse(e.getBoolean("skipped"));
                longestSync = Math.max(longestSync, sync);
                shortestWait = Math.min(shortestWait, wait);
            }
            StepReport report = reports.get(step);
            assertEquals(report.examples(), examples, "step " + step + " examples");
            assertEquals(report.syncNanos(), longestSync, "step " + step + ": the report's sync is the longest worker's");
            assertEquals(0, shortestWait, "step " + step + ": the last worker to arrive waits for no one");
        }
        assertEquals(0, steps.get("2/1").getLong("examples"), "worker 1 is idle in the short last step");
        List<RecordedEvent> saved = all.stream().filter(e -> e.getEventType().getName().equals("symmem4j.Checkpoint")).toList();
        assertEquals(1, saved.size(), "checkpointEvery(2) over 3 steps: one checkpoint, after step 2: " + saved);
        RecordedEvent c = saved.getFirst();
        assertEquals(2, c.getLong("step"));
        assertEquals("COMPLETED", c.getString("outcome"));
        assertTrue(c.getBoolean("leader"));
        Path written = Path.of(c.getString("directory"));
        long bytes;
        try (var files = Files.list(written)) {
            bytes = files.mapToLong(f -> f.toFile().length()).sum();
        }
        assertEquals(bytes, c.getLong("bytes"), "the bytes of every file in " + written);
    }
}
