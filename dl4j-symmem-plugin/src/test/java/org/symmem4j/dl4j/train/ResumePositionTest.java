package org.symmem4j.dl4j.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;

/** The resume position both trainers keep: what a restore records, what the next fit skips, and its reset. */
class ResumePositionTest {

    private static final Path DIR = Path.of("run", "step-7");
    /** Step 7, epoch 0, two batches of the epoch trained, of 10 examples. */
    private static final CheckpointDirectory.Counters COUNTERS = new CheckpointDirectory.Counters(7, 0, 7, 2, 10, 1);

    /** Three batches of {@code examples} examples each. */
    private static Iterator<Object> batches(long examples) {
        return new ArrayList<Object>(Collections.nCopies(3, examples)).iterator();
    }

    private static long skipped(FitAgreement start, Iterator<Object> batches) {
        start.skip(batches, b -> (Long) b);
        return start.skipped();
    }

    @Test
    void aFreshStartSkipsNothing() {
        ResumePosition resume = new ResumePosition();
        assertNull(resume.resumedFrom());
        assertEquals(0, skipped(resume.fitStart(null, CheckpointLayout.plain(), true), batches(5)));
    }

    @Test
    void aRestoreSkipsTheBatchesOfItsEpochOnceAndChecksTheirExamplesWhenAsked() {
        ResumePosition resume = new ResumePosition();
        resume.restored(DIR, COUNTERS);
        assertEquals(new CheckpointDirectory.Checkpoint(DIR, COUNTERS), resume.resumedFrom());

        Iterator<Object> it = batches(5);
        assertEquals(2, skipped(resume.fitStart(null, CheckpointLayout.plain(), true), it));
        assertTrue(it.hasNext()); // the third batch is the fit's first

        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> skipped(resume.fitStart(null, CheckpointLayout.plain(), true), batches(4)));
        assertTrue(e.getMessage().contains("examples=10") && e.getMessage().contains(DIR.toString()), e.getMessage());
        // the pipeline's checkpoints record batches only: their examples are not checked
        assertEquals(2, skipped(resume.fitStart(null, CheckpointLayout.plain(), false), batches(4)));

        resume.skipped();
        assertEquals(0, skipped(resume.fitStart(null, CheckpointLayout.plain(), true), batches(4)));
        assertEquals(new CheckpointDirectory.Checkpoint(DIR, COUNTERS), resume.resumedFrom()); // still says what
    }

    @Test
    void restoreLatestRestoresTheCheckpointFoundAndNothingWhenNone() throws Exception {
        List<Path> restored = new ArrayList<>();
        assertTrue(ResumePosition.restoreLatest(Optional.empty(), restored::add).isEmpty());
        assertTrue(restored.isEmpty());

        Optional<CheckpointDirectory.Checkpoint> latest =
                Optional.of(new CheckpointDirectory.Checkpoint(DIR, COUNTERS));
        assertSame(latest, ResumePosition.restoreLatest(latest, restored::add));
        assertEquals(List.of(DIR), restored);
    }
}
