package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Group mode's agreement on a shrink's failed step ({@link SurvivorSteps}): every survivor gets the same answer from
 * its own failed step, whichever step the abort reached it in. The cases the whole-wrapper tests (ShrinkTest's group
 * mode, TensorParallelThreadShrinkTest) meet only under load, with the survivors' positions written out.
 */
class SurvivorStepsTest {

    private static final IllegalStateException CAUSE = new IllegalStateException("peer died");

    /** A rank's failed step {@code step}, handed out at iteration {@code atStart}. */
    private static DataParallelSteps.LostWorkers lost(long step, int atStart) {
        return new DataParallelSteps.LostWorkers(step, List.of(), CAUSE, atStart, null, 0);
    }

    @Test
    void aSurvivorStillFinishingTheStepBeforeAgreesOnTheOthersFailedStep() {
        // survivor a: the abort reached it in step 1's loss merge, past its update (iteration 1 -> 2); survivor b was
        // already in step 2, before its sync (iteration 2). Each on its own reported 1 (done) and 2 (redone).
        DataParallelSteps.LostWorkers a = lost(1, 1);
        DataParallelSteps.LostWorkers b = lost(2, 2);
        List<String> positions = List.of(SurvivorSteps.position(a, 2), SurvivorSteps.position(b, 2));
        for (DataParallelSteps.LostWorkers mine : List.of(a, b)) {
            SurvivorSteps.Agreed agreed = SurvivorSteps.agree(positions, mine);
            assertEquals(2, agreed.failedStep(), "every survivor reports step 2, which all of them redo");
            assertEquals(2, agreed.iteration(), "from step 2's start, which both hold");
        }
    }

    @Test
    void aSurvivorWhoseUpdateRanGoesBackToTheStepOthersHadNotCompleted() {
        // survivor a stopped before its update of step 2 (iteration 2), b's ran (iteration 3): step 2 is redone
        DataParallelSteps.LostWorkers a = lost(2, 2);
        DataParallelSteps.LostWorkers b = lost(2, 2);
        List<String> positions = List.of(SurvivorSteps.position(a, 2), SurvivorSteps.position(b, 3));
        assertEquals(new SurvivorSteps.Agreed(2, 2), SurvivorSteps.agree(positions, a));
        assertEquals(new SurvivorSteps.Agreed(2, 2), SurvivorSteps.agree(positions, b));
        // and with the laggard of the step before among them (step 1, its update run: first not done 2)
        List<String> three = List.of(positions.get(0), positions.get(1), SurvivorSteps.position(lost(1, 1), 2));
        assertEquals(new SurvivorSteps.Agreed(2, 2), SurvivorSteps.agree(three, lost(1, 1)));
    }

    @Test
    void whenEverySurvivorCompletedItsStepTheNextOneIsTheFailedOne() {
        // every survivor's update of step 4 ran (iteration 7 -> 8, an offset of 3 from earlier fits' skipped steps)
        DataParallelSteps.LostWorkers mine = lost(4, 7);
        List<String> positions = List.of(SurvivorSteps.position(mine, 8), SurvivorSteps.position(lost(4, 7), 8));
        assertEquals(List.of("8 5", "8 5"), positions);
        assertEquals(new SurvivorSteps.Agreed(8, 5), SurvivorSteps.agree(positions, mine));
    }

    @Test
    void survivorsWhoseStepAndIterationCountersDisagreeAreABug() {
        DataParallelSteps.LostWorkers mine = lost(2, 2);
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> SurvivorSteps.agree(List.of("2 2", "5 2"), mine));
        assertTrue(e.getMessage().contains("(5 2)") && e.getMessage().contains("[2 2, 5 2]"), e.getMessage());
    }
}
