package org.symmem4j.pipeline.schedule;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

class ScheduleValidatorTest {

    private static final PipelineShape TWO_RANKS_TWO_MICROBATCHES = PipelineShape.of(2, 2);

    private static List<String> violations(String text, PipelineShape shape) {
        return ScheduleValidator.violations(Schedule.parse(text), shape);
    }

    @Test
    void everyGeneratedScheduleIsValid() {
        for (int ranks : new int[] {1, 2, 3, 4, 8}) {
            for (int microbatches : new int[] {1, 2, ranks, 2 * ranks, 4 * ranks}) {
                PipelineShape flat = PipelineShape.of(ranks, microbatches);
                assertEquals(List.of(), ScheduleValidator.violations(ScheduleGenerators.gpipe(ranks, microbatches), flat));
                assertEquals(List.of(), ScheduleValidator.violations(ScheduleGenerators.oneFOneB(ranks, microbatches), flat));
                if (microbatches % ranks == 0) {
                    for (int stagesPerRank = 1; stagesPerRank <= 3; stagesPerRank++) {
                        assertEquals(List.of(), ScheduleValidator.violations(
                                ScheduleGenerators.interleavedOneFOneB(ranks, microbatches, stagesPerRank),
                                new PipelineShape(ranks, microbatches, stagesPerRank)));
                    }
                }
            }
        }
    }

    @Test
    void missingActionIsNamedWithItsRank() {
        List<String> violations = violations("""
                rank 0: 0F0 0F1 0B0 0B1
                rank 1: 1F0 1B0 1F1
                """, TWO_RANKS_TWO_MICROBATCHES);
        assertEquals(List.of("missing action: action=1B1 expected on rank=1"
                + " (each stage runs one F per microbatch and one B, or its halves one I and one W)"), violations);
    }

    @Test
    void duplicateActionIsNamedWithBothPlaces() {
        List<String> violations = violations("""
                rank 0: 0F0 0F1 0B0 0B1 0F1
                rank 1: 1F0 1B0 1F1 1B1
                """, TWO_RANKS_TWO_MICROBATCHES);
        assertEquals(List.of("duplicate action: rank=0 index=4 action=0F1 first at rank=0 index=1"
                + " (each stage runs one F per microbatch and one B, or its halves one I and one W; remove one)"), violations);
    }

    @Test
    void stageOnWrongRankIsNamedWithItsOwner() {
        List<String> violations = violations("""
                rank 0: 0F0 1F0 0F1 0B0 0B1
                rank 1: 1B0 1F1 1B1
                """, TWO_RANKS_TWO_MICROBATCHES);
        // 1F0 is present (on the wrong rank), so it is not also reported missing; 1B0 on rank 1 is fine
        assertEquals(List.of("stage on wrong rank: rank=0 index=1 action=1F0 expected rank=1"
                + " (stage s lives on rank s % ranks = 1 % 2; move it to rank 1)"), violations);
    }

    @Test
    void interleavedStageOnWrongRankUsesModulo() {
        // ranks=2 stagesPerRank=2: stage 2 lives on rank 0, stage 3 on rank 1; swap 2F0 and 3F0
        String text = ScheduleGenerators.interleavedOneFOneB(2, 2, 2).toText()
                .replace("2F0", "XX").replace("3F0", "2F0").replace("XX", "3F0");
        List<String> violations = violations(text, new PipelineShape(2, 2, 2));
        assertEquals(2, violations.size(), violations.toString());
        assertTrue(violations.get(0).startsWith("stage on wrong rank: rank=0 index=2 action=3F0 expected rank=1"),
                violations.toString());
        assertTrue(violations.get(1).startsWith("stage on wrong rank: rank=1 index=2 action=2F0 expected rank=0"),
                violations.toString());
    }

    @Test
    void backwardBeforeItsForwardIsADependencyOrderViolation() {
        List<String> violations = violations("""
                rank 0: 0B0 0F0 0F1 0B1
                rank 1: 1F0 1B0 1F1 1B1
                """, TWO_RANKS_TWO_MICROBATCHES);
        assertEquals(List.of("dependency order: rank=0 index=1 action=0F0 comes after action=0B0 at index=0,"
                + " which depends on it (on one rank a microbatch's forwards go by ascending stage, then its"
                + " backwards by descending stage; move 0F0 before 0B0)"), violations);
    }

    @Test
    void virtualStagesOfOneRankMustFollowPipelineOrder() {
        // rank 0 holds stages 0 and 2: F(2, 0) needs F(0, 0) first (through stage 1 on rank 1)
        PipelineShape shape = new PipelineShape(2, 2, 2);
        String text = ScheduleGenerators.interleavedOneFOneB(2, 2, 2).toText();
        assertTrue(text.startsWith("rank 0: 0F0 0F1 2F0 2F1 "), text);
        String swapped = text.replaceFirst("0F0 0F1 2F0", "2F0 0F1 0F0");
        List<String> violations = violations(swapped, shape);
        assertEquals(List.of("dependency order: rank=0 index=2 action=0F0 comes after action=2F0 at index=0,"
                + " which depends on it (on one rank a microbatch's forwards go by ascending stage, then its"
                + " backwards by descending stage; move 0F0 before 2F0)"), violations);
    }

    @Test
    void outOfRangeActionsAndWrongRankCountAreNamed() {
        List<String> violations = violations("""
                rank 0: 0F0 0F1 0B0 0B1 4F0 0F7
                rank 1: 1F0 1B0 1F1 1B1
                rank 2:
                """, TWO_RANKS_TWO_MICROBATCHES);
        assertEquals(List.of(
                "rank count mismatch: found=3 expected=2 (one action list per rank; ranks=2 microbatches=2"
                        + " stagesPerRank=1)",
                "stage out of range: rank=0 index=4 action=4F0 expected=stage in [0, 2) (ranks=2 microbatches=2"
                        + " stagesPerRank=1)",
                "microbatch out of range: rank=0 index=5 action=0F7 expected=microbatch in [0, 2) (ranks=2"
                        + " microbatches=2 stagesPerRank=1)"), violations);
    }

    @Test
    void requireValidReportsEveryViolationAtOnce() {
        // missing 1B1, duplicate 0F0, 1F0 on rank 0
        Schedule broken = Schedule.parse("""
                rank 0: 0F0 1F0 0F1 0B0 0B1 0F0
                rank 1: 1B0 1F1
                """);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ScheduleValidator.requireValid(broken, TWO_RANKS_TWO_MICROBATCHES));
        String message = e.getMessage();
        assertTrue(message.startsWith("invalid schedule: violations=3 (ranks=2 microbatches=2 stagesPerRank=1; fix: change"
                + " the actions as each line says, or build the schedule with ScheduleGenerators):\n"),
                message);
        assertTrue(message.contains("\n  stage on wrong rank: rank=0 index=1 action=1F0 expected rank=1"), message);
        assertTrue(message.contains("\n  duplicate action: rank=0 index=5 action=0F0 first at rank=0 index=0"), message);
        assertTrue(message.contains("\n  missing action: action=1B1 expected on rank=1"), message);
        ScheduleValidator.requireValid(ScheduleGenerators.oneFOneB(2, 2), TWO_RANKS_TWO_MICROBATCHES);
    }
}
