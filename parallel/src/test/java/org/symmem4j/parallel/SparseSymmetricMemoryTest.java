package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * Allocated host symmetric memory is sparse: pages hold memory only once written, and
 * {@link SymmetricMemory#decommit} gives them back (they read zero again), counted with
 * {@link SymmetricMemory#residentBytes}. Registered memory is the caller's and is refused.
 */
class SparseSymmetricMemoryTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));
    private static final long PAGE = 4096;

    @Test
    void allocatedMemoryHoldsOnlyWrittenPagesAndDecommitGivesThemBack() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            long pages = 256; // 1 MiB
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, pages * PAGE)) {
                assertTrue(group.transport().capabilities(group).supports(TransportCapabilities.Capability.DECOMMIT));
                assertEquals(0, mem.residentBytes(0, pages * PAGE), "nothing written yet: nothing resident");
                MemorySegment local = mem.local();
                for (long p = 0; p < 100; p++) {
                    local.set(ValueLayout.JAVA_LONG, p * PAGE + 8, 1000 + p);
                }
                assertEquals(100 * PAGE, mem.residentBytes(0, pages * PAGE), "exactly the pages written");
                // pages 10..19 fully inside [10 pages - 100 B, 20 pages + 100 B): bytes of pages 9 and 20 stay
                local.set(ValueLayout.JAVA_LONG, 10 * PAGE - 16, 77);
                mem.decommit(10 * PAGE - 100, 10 * PAGE + 200);
                assertEquals(90 * PAGE, mem.residentBytes(0, pages * PAGE));
                assertEquals(0, mem.residentBytes(10 * PAGE, 10 * PAGE));
                assertEquals(77, local.get(ValueLayout.JAVA_LONG, 10 * PAGE - 16), "a page the range covers in part keeps its bytes");
                assertEquals(1020, local.get(ValueLayout.JAVA_LONG, 20 * PAGE + 8));
                for (long p = 10; p < 20; p++) {
                    assertEquals(0, local.get(ValueLayout.JAVA_LONG, p * PAGE + 8), "a decommitted page reads zero");
                }
                // (a read maps the kernel's shared zero page, which mincore counts although it holds no memory of ours)
                mem.barrier();
                // a peer sees the zeros too (threads share the mapping)
                MemorySegment peer = mem.peer(1 - group.rank());
                assertEquals(0, peer.get(ValueLayout.JAVA_LONG, 15 * PAGE + 8));
                assertEquals(1030, peer.get(ValueLayout.JAVA_LONG, 30 * PAGE + 8));
                mem.barrier();
                assertThrows(IndexOutOfBoundsException.class, () -> mem.decommit(pages * PAGE - 10, 20));
            }
            return null;
        });
    }

    @Test
    void registeredMemoryIsTheCallersAndIsRefused() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment buffer = arena.allocate(4 * PAGE, PAGE);
                try (SymmetricMemory mem = SymmetricMemory.register(group, buffer)) {
                    UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class,
                            () -> mem.decommit(0, 4 * PAGE));
                    assertTrue(e.getMessage().contains("SymmetricMemory.allocate"), e.getMessage());
                    assertEquals(4 * PAGE, mem.residentBytes(0, 4 * PAGE), "an arena's memory is zeroed, so resident");
                }
            }
            return null;
        });
    }
}
