package org.symmem4j.dl4j.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link CheckpointLayout} on directories written by hand: the newest step complete on every tensor-parallel rank is
 * the one found, pruning never deletes it while another rank still writes a newer one, and roots or directories of
 * another degree, rank or kind of run are refused naming both sides.
 */
class CheckpointLayoutTest {

    @TempDir
    Path root;

    /** A complete checkpoint of tp rank {@code rank} of {@code size} at {@code step}, as a leader writes it. */
    private void write(int rank, int size, long step) throws IOException {
        CheckpointLayout layout = CheckpointLayout.tensorParallel(rank, size);
        Path dir = layout.stepDir(root, step);
        layout.begin(dir);
        CheckpointDirectory.writeAtomically(dir.resolve("model.zip"), tmp -> Files.writeString(tmp, "shard " + rank));
        CheckpointDirectory.writeManifest(dir, new CheckpointDirectory.Counters(step, 0, (int) step, step, 1));
    }

    /** A checkpoint begun and not completed (its manifest never written). */
    private void tear(int rank, int size, long step) throws IOException {
        Path dir = CheckpointLayout.tensorParallel(rank, size).stepDir(root, step);
        CheckpointLayout.tensorParallel(rank, size).begin(dir);
        Files.writeString(dir.resolve("model.zip"), "half");
    }

    private List<String> steps(int rank, int size) throws IOException {
        try (Stream<Path> s = Files.list(CheckpointLayout.tensorParallel(rank, size).ownRoot(root))) {
            return s.map(p -> p.getFileName().toString()).sorted().toList();
        }
    }

    private long latest(int rank, int size) throws IOException {
        Optional<CheckpointDirectory.Checkpoint> c = CheckpointLayout.tensorParallel(rank, size).latestComplete(root, null, "t-");
        c.ifPresent(found -> assertEquals(CheckpointLayout.tensorParallel(rank, size).stepDir(root,
                found.counters().step()), found.dir(), "this rank's own directory"));
        return c.map(found -> found.counters().step()).orElse(-1L);
    }

    @Test
    void theNewestStepCompleteOnEveryRankIsFoundAndKeptWhileANewerOneIsWritten() throws IOException {
        for (int r = 0; r < 3; r++) {
            write(r, 3, 10);
            write(r, 3, 20);
        }
        write(0, 3, 30);
        write(1, 3, 30);
        tear(2, 3, 30); // rank 2 died writing step 30
        for (int r = 0; r < 3; r++) {
            assertEquals(20, latest(r, 3), "rank " + r);
        }
        // keep 1: rank 0 keeps 30 (its newest) and 20 (the newest on every rank), deletes 10
        CheckpointLayout.tensorParallel(0, 3).prune(root, 1);
        assertEquals(List.of("step-000000000020", "step-000000000030"), steps(0, 3));
        // rank 2 keeps its torn 30 (newer than its newest complete) and 20
        CheckpointLayout.tensorParallel(2, 3).prune(root, 1);
        assertEquals(List.of("step-000000000020", "step-000000000030"), steps(2, 3));
        // once rank 2 completes 30, step 20 goes
        write(2, 3, 30);
        for (int r = 0; r < 3; r++) {
            assertEquals(30, latest(r, 3), "rank " + r);
            CheckpointLayout.tensorParallel(r, 3).prune(root, 1);
            assertEquals(List.of("step-000000000030"), steps(r, 3));
        }
    }

    @Test
    void noStepCompleteOnEveryRankMeansAFreshStartAndNothingPruned() throws IOException {
        write(0, 2, 10);
        tear(1, 2, 10);
        assertEquals(-1, latest(0, 2));
        assertEquals(-1, latest(1, 2));
        write(0, 2, 20);
        CheckpointLayout.tensorParallel(0, 2).prune(root, 1);
        assertEquals(List.of("step-000000000010", "step-000000000020"), steps(0, 2), "nothing is loadable yet: all kept");
    }

    @Test
    void anotherDegreesNewestStepIsFoundForReslicingAndAnotherRankAndAnotherKindOfRunAreRefused() throws IOException {
        write(0, 2, 10);
        write(1, 2, 10);
        // another degree's newest step complete on every one of its ranks: its rank 0's directory, whose siblings a
        // restore re-slices onto this degree
        CheckpointDirectory.Checkpoint other = CheckpointLayout.tensorParallel(3, 4).latestComplete(root, null, "t-")
                .orElseThrow();
        assertEquals(root.resolve("tp-0-of-2").resolve("step-000000000010"), other.dir());
        assertEquals(List.of(root.resolve("tp-0-of-2").resolve("step-000000000010"),
                root.resolve("tp-1-of-2").resolve("step-000000000010")),
                CheckpointLayout.tensorParallel(3, 4).otherDegreeDirs(other.dir(), null));
        assertEquals(List.of(root.resolve("tp-0-of-2"), root.resolve("tp-1-of-2")),
                CheckpointLayout.tensorParallel(0, 1).otherDegreeDirs(root, null), "a directory of every rank's");
        assertEquals(List.of(), CheckpointLayout.tensorParallel(1, 2).otherDegreeDirs(other.dir(), null), "its own degree");
        // this degree's newer step wins; an older one loses to the other degree's
        write(0, 4, 5);
        write(1, 4, 5);
        write(2, 4, 5);
        write(3, 4, 5);
        assertEquals(root.resolve("tp-0-of-2").resolve("step-000000000010"),
                CheckpointLayout.tensorParallel(0, 4).latestComplete(root, null, "t-").orElseThrow().dir());
        for (int r = 0; r < 4; r++) {
            write(r, 4, 20);
        }
        assertEquals(CheckpointLayout.tensorParallel(2, 4).stepDir(root, 20),
                CheckpointLayout.tensorParallel(2, 4).latestComplete(root, null, "t-").orElseThrow().dir());
        IllegalArgumentException plainRun = assertThrows(IllegalArgumentException.class,
                () -> CheckpointLayout.plain().latestComplete(root, null, "t-"));
        assertTrue(plainRun.getMessage().contains("holds a tensor-parallel run's checkpoints [tp-0-of-2, tp-0-of-4,"
                + " tp-1-of-2, tp-1-of-4, tp-2-of-4, tp-3-of-4]: expected a network that is not tensor-parallel's"),
                plainRun.getMessage());
        assertThrows(IllegalArgumentException.class, () -> CheckpointDirectory.latestComplete(root));

        Path rank1 = CheckpointLayout.tensorParallel(1, 2).stepDir(root, 10);
        IllegalArgumentException rank = assertThrows(IllegalArgumentException.class,
                () -> CheckpointLayout.tensorParallel(0, 2).checkShard(rank1));
        assertTrue(rank.getMessage().startsWith("checkpoint " + rank1 + " holds tensor-parallel rank=1 size=2's shard:"
                + " expected rank=0 size=2's"), rank.getMessage());
        CheckpointLayout.tensorParallel(1, 2).checkShard(rank1);
        assertThrows(IllegalArgumentException.class, () -> CheckpointLayout.plain().checkShard(rank1));
        // a directory holding every rank's: each rank's own, the degree checked
        assertEquals(CheckpointLayout.tensorParallel(1, 2).ownRoot(root), CheckpointLayout.tensorParallel(1, 2).restoreDir(root));
        IllegalArgumentException three = assertThrows(IllegalArgumentException.class,
                () -> CheckpointLayout.tensorParallel(1, 3).restoreDir(root));
        assertTrue(three.getMessage().contains("which re-slices another degree's shards onto this one"), three.getMessage());

        Path plain = root.resolve("plain");
        CheckpointDirectory.begin(CheckpointDirectory.stepDir(plain, 5));
        CheckpointLayout.plain().checkShard(CheckpointDirectory.stepDir(plain, 5));
        IllegalArgumentException whole = assertThrows(IllegalArgumentException.class,
                () -> CheckpointLayout.tensorParallel(0, 2).checkShard(CheckpointDirectory.stepDir(plain, 5)));
        assertTrue(whole.getMessage().contains("holds no " + CheckpointLayout.MARKER), whole.getMessage());
        IllegalArgumentException plainRoot = assertThrows(IllegalArgumentException.class,
                () -> CheckpointLayout.tensorParallel(0, 2).latestComplete(plain, null, "t-"));
        assertTrue(plainRoot.getMessage().contains("holds checkpoints of a network that is not tensor-parallel"
                + " [step-000000000005]: expected tensor-parallel degree 2's"), plainRoot.getMessage());
    }

    @Test
    void aBadRankOrSizeIsRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> CheckpointLayout.tensorParallel(2, 2));
        assertEquals("tensor-parallel rank=2 size=2: expected 0 <= rank < size (fix: pass the tensor-parallel group's"
                + " rank and size)", e.getMessage());
    }
}
