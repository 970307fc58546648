package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import org.symmem4j.dl4j.train.CheckpointDirectory;

/**
 * The refusals every sharded checkpoint format must make, shared by the stage-3 and HSDP checkpoint tests: copies of a
 * good checkpoint broken three ways (no manifest; the last rank's parameter file cut short after the manifest was
 * written; that file missing from a directory whose manifest says it is complete) are refused, each with a message
 * naming what is wrong.
 */
final class CheckpointRefusals {

    private CheckpointRefusals() {
    }

    /**
     * Restores the three broken copies of {@code ckpt} (made under {@code root}) into {@code wrapper}, asserting each
     * refusal; whether the wrapper was left as it was is the caller's to check.
     *
     * @param ranks the ranks that wrote {@code ckpt}: the last one's parameter file is broken
     * @return the partial checkpoint's refusal, for checks of the caller's own
     */
    static IllegalArgumentException assertTornAndPartialRefused(SymmemParallelWrapper wrapper, Path ckpt, Path root,
                                                                int ranks) throws IOException {
        String lastParams = ShardCheckpoint.paramsFileName(ranks - 1, ranks);
        // torn: no manifest (a save that died before its last write)
        Path noManifest = copy(ckpt, root, "no-manifest");
        Files.delete(noManifest.resolve(CheckpointDirectory.MANIFEST));
        IOException e = assertThrows(CheckpointDirectory.TornCheckpointException.class,
                () -> wrapper.restoreCheckpoint(noManifest));
        assertTrue(e.getMessage().contains("torn") && e.getMessage().contains(CheckpointDirectory.MANIFEST), e.getMessage());
        // torn: a parameter file cut short after the manifest was written
        Path truncated = copy(ckpt, root, "truncated");
        try (RandomAccessFile f = new RandomAccessFile(truncated.resolve(lastParams).toFile(), "rw")) {
            f.setLength(f.length() - 16);
        }
        e = assertThrows(CheckpointDirectory.TornCheckpointException.class, () -> wrapper.restoreCheckpoint(truncated));
        assertTrue(e.getMessage().contains(lastParams), e.getMessage());
        // partial: a parameter file missing from a complete-looking directory
        Path partial = copy(ckpt, root, "partial");
        Files.delete(partial.resolve(lastParams));
        CheckpointDirectory.writeManifest(partial, CheckpointDirectory.verify(ckpt));
        IllegalArgumentException p = assertThrows(IllegalArgumentException.class, () -> wrapper.restoreCheckpoint(partial));
        assertTrue(p.getMessage().contains("lacks the shard files of workers [" + (ranks - 1) + "]"), p.getMessage());
        return p;
    }

    /** A copy of the flat directory {@code dir} as {@code root/name}. */
    static Path copy(Path dir, Path root, String name) throws IOException {
        Path to = root.resolve(name);
        Files.createDirectories(to);
        try (var listing = Files.list(dir)) {
            for (Path f : listing.toList()) {
                Files.copy(f, to.resolve(f.getFileName()));
            }
        }
        return to;
    }
}
