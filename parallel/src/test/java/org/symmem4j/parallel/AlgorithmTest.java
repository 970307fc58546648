package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

class AlgorithmTest {

    @Test
    void everyAlgorithmRunsOnOneProvider() {
        for (Algorithm a : List.of(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING, Algorithm.HIERARCHICAL)) {
            assertEquals(Provider.SYMMEM, a.provider(), a.name());
            assertFalse(a.handsToLibrary(), a.name());
        }
        assertEquals(Provider.NCCL, Algorithm.NCCL.provider());
        assertEquals(Provider.NCCL, Algorithm.NCCL_SYMMETRIC.provider(), "NCCL on a symmetric window is still NCCL");
        assertEquals(Provider.MPI, Algorithm.MPI.provider());
        assertEquals(Provider.NVSHMEM, Algorithm.NVSHMEM.provider());
        assertTrue(Algorithm.NCCL_SYMMETRIC.handsToLibrary());
    }

    @Test
    void aLibraryNamesTheAlgorithmThatHandsItTheCollective() {
        for (Provider p : List.of(Provider.NCCL, Provider.MPI, Provider.NVSHMEM)) {
            assertEquals(p, p.library().provider(), p.name());
        }
        assertEquals(Algorithm.NCCL, Provider.NCCL.library(), "plain NCCL, not the symmetric window");
        assertTrue(assertThrows(IllegalArgumentException.class, Provider.SYMMEM::library).getMessage().contains("TWO_SHOT"));
    }

    @Test
    void persistedOrderIsUnchanged() {
        // ordinals travel in the op descriptor ranks compare and index the meters: appending is the only safe change
        assertEquals(List.of("ONE_SHOT", "TWO_SHOT", "RING", "NCCL", "NCCL_SYMMETRIC", "MPI", "HIERARCHICAL", "NVSHMEM"),
                java.util.Arrays.stream(Algorithm.values()).map(Enum::name).toList());
    }

    @Test
    void parseReadsEverySpellingAndNamesWhatIsAccepted() {
        for (Algorithm a : Algorithm.values()) {
            assertEquals(a, Algorithm.parse(a.name()));
            assertEquals(a, Algorithm.parse(a.name().toLowerCase(java.util.Locale.ROOT).replace('_', '-')));
        }
        assertEquals(Algorithm.NCCL_SYMMETRIC, Algorithm.parse(" nccl_symmetric "));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Algorithm.parse("TURBO"));
        assertTrue(e.getMessage().contains("algorithm=TURBO") && e.getMessage().contains("NCCL_SYMMETRIC"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Algorithm.parse(null));
    }
}
