package org.symmem4j.it;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The long fault soak (not part of CI: tagged {@code soak}; run by {@code bench/fault-soak.sh}, or without
 * Maven through {@link FaultSoak#main}): SIGKILL trials on 3-rank groups (during set-up, some with another
 * survivor descheduled around the kill, and mid-collective, rank 0 included) and SIGSTOP trials on 3- and
 * 4-rank groups (RING, ONE_SHOT, TWO_SHOT), the victim and the moment chosen at random. See {@link FaultSoak}
 * for what each trial records.
 *
 * <p>System properties: {@code soak.trials} (SIGKILL trials, default 200), {@code soak.stopTrials} (SIGSTOP
 * trials, default 200), {@code soak.seed} (default 1), {@code soak.parallel} (trials at a time, default 1),
 * {@code soak.out} (default target/fault-soak.md).
 */
@Tag("soak")
class FaultSoakTest {

    @Test
    void soak() throws Exception {
        Path out = Path.of(System.getProperty("soak.out", "target/fault-soak.md"));
        List<FaultSoak.Trial> results = FaultSoak.run(Integer.getInteger("soak.trials", 200),
                Integer.getInteger("soak.stopTrials", 200), Long.getLong("soak.seed", 1),
                Integer.getInteger("soak.parallel", 1), out);
        long bad = results.stream().filter(FaultSoak.Trial::failed).count();
        assertEquals(0, bad, "trials with a hang, a corruption, residue or a failed rank not blamed; see " + out);
    }
}
