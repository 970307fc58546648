package org.symmem4j.dl4j.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link CheckpointSchedule#take}, the periodic checkpoint both trainers take through it: the writer is handed the
 * step's directory of the rank's layout, the checkpoints beyond {@code keep} are pruned after it, and a write that
 * fails is one exception naming the step, the directory and the fix, the checkpoints before it kept.
 */
class CheckpointScheduleTest {

    @TempDir
    Path root;

    /** Writes a complete checkpoint of {@code step} into {@code dir}, as a trainer's format would. */
    private static void complete(Path dir, long step) throws IOException {
        CheckpointDirectory.begin(dir);
        CheckpointDirectory.writeAtomically(dir.resolve("model.zip"), tmp -> Files.writeString(tmp, "step " + step));
        CheckpointDirectory.writeManifest(dir, new CheckpointDirectory.Counters(step, 0, (int) step, step, 1));
    }

    private List<String> stepDirs(Path under) throws IOException {
        try (Stream<Path> s = Files.list(under)) {
            return s.map(p -> p.getFileName().toString()).filter(n -> n.startsWith("step-")).sorted().toList();
        }
    }

    @Test
    void takeWritesTheStepDirectoryThenPrunesBeyondKeep() throws IOException {
        CheckpointSchedule schedule = new CheckpointSchedule(1, null, root, 2);
        List<Path> handed = new ArrayList<>();
        for (long step = 1; step <= 4; step++) {
            long s = step;
            schedule.take(step, CheckpointLayout.plain(), null, dir -> {
                handed.add(dir);
                complete(dir, s);
            });
        }
        assertEquals(List.of(CheckpointDirectory.stepDir(root, 1), CheckpointDirectory.stepDir(root, 2),
                CheckpointDirectory.stepDir(root, 3), CheckpointDirectory.stepDir(root, 4)), handed);
        assertEquals(List.of(CheckpointDirectory.stepDir(root, 3).getFileName().toString(),
                CheckpointDirectory.stepDir(root, 4).getFileName().toString()), stepDirs(root));
    }

    @Test
    void aTensorParallelRankWritesUnderItsOwnRoot() throws IOException {
        CheckpointSchedule schedule = new CheckpointSchedule(1, null, root, 1);
        CheckpointLayout rank1 = CheckpointLayout.tensorParallel(1, 2);
        List<Path> handed = new ArrayList<>();
        schedule.take(7, rank1, null, dir -> {
            handed.add(dir);
            complete(dir, 7);
        });
        assertEquals(List.of(rank1.stepDir(root, 7)), handed);
        assertTrue(handed.getFirst().startsWith(rank1.ownRoot(root)));
        assertFalse(handed.getFirst().getParent().equals(root), "a tp rank's checkpoint is not at the root");
    }

    @Test
    void aFailedWriteNamesTheStepAndTheFixAndKeepsTheCheckpointsBeforeIt() throws IOException {
        CheckpointSchedule schedule = new CheckpointSchedule(0, Duration.ofDays(1), root, 1);
        schedule.take(1, CheckpointLayout.plain(), null, dir -> complete(dir, 1));
        IOException cause = new IOException("disk full");
        UncheckedIOException e = assertThrows(UncheckedIOException.class,
                () -> schedule.take(2, CheckpointLayout.plain(), null, dir -> {
                    CheckpointDirectory.begin(dir);
                    throw cause;
                }));
        assertSame(cause, e.getCause());
        assertInstanceOf(IOException.class, e.getCause());
        assertTrue(e.getMessage().contains("periodic checkpoint step=2 dir=" + CheckpointDirectory.stepDir(root, 2)),
                e.getMessage());
        assertTrue(e.getMessage().contains("disk full") && e.getMessage().contains("fix: "), e.getMessage());
        // nothing pruned: the complete checkpoint of step 1 is still the newest one to resume from
        assertEquals(1, CheckpointDirectory.latestComplete(root).orElseThrow().counters().step());
    }
}
