package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.DeviceMaps;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The set-up the GPU structures share ({@link SharedMemories#createOnDevice}, {@link SharedMemories#writeHeader}),
 * run on host memory between threads (the capability asked for: the memory itself), and the device map's refusal of a
 * host group, which goes through it.
 */
class SharedMemoriesTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    /** Each rank's header is written, read back and checked before the barrier; after it every rank sees them all. */
    @Test
    void everyRanksHeaderIsWrittenAndCheckedBeforeTheBarrier() {
        List<List<Long>> seen = InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            long mine = 1000 + group.rank();
            List<Long> checked = new ArrayList<>();
            return SharedMemories.createOnDevice(group, 64, "test structure", SymmetricMemory.class, "unused", "unused",
                    (memory, same) -> {
                        assertSame(memory, same);
                        SharedMemories.writeHeader(16, header -> {
                            header.set(ValueLayout.JAVA_LONG, 0, mine);
                            header.set(ValueLayout.JAVA_LONG, 8, -mine);
                        }, header -> memory.copyFromHost(header, 0), back -> memory.copyToHost(0, back),
                                back -> checked.add(back.get(ValueLayout.JAVA_LONG, 0) + back.get(ValueLayout.JAVA_LONG, 8)));
                    },
                    (memory, same) -> {
                        try (memory) {
                            List<Long> all = new ArrayList<>(checked);
                            for (int r = 0; r < group.worldSize(); r++) {
                                MemorySegment peer = memory.peer(r);
                                all.add(peer.get(ValueLayout.JAVA_LONG, 0));
                                all.add(peer.get(ValueLayout.JAVA_LONG, 16)); // past the header: zero
                            }
                            return all;
                        }
                    });
        });
        for (List<Long> s : seen) {
            assertEquals(List.of(0L, 1000L, 0L, 1001L, 0L, 1002L, 0L), s);
        }
    }

    /** A check that fails closes the memory on every rank and leaves with the check's own exception. */
    @Test
    void aFailingCheckClosesTheMemoryAndRethrows() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            SymmetricMemory[] kept = new SymmetricMemory[1];
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> SharedMemories.createOnDevice(group,
                    64, "test structure", SymmetricMemory.class, "unused", "unused", (memory, same) -> {
                        kept[0] = memory;
                        SharedMemories.writeHeader(8, header -> header.set(ValueLayout.JAVA_LONG, 0, 5),
                                header -> memory.copyFromHost(header, 0), back -> memory.copyToHost(0, back), back -> {
                                    throw new IllegalStateException("bad header: rank=" + group.rank() + " found="
                                            + back.get(ValueLayout.JAVA_LONG, 0));
                                });
                    }, (memory, same) -> fail("built after a failed check")));
            assertEquals("bad header: rank=" + group.rank() + " found=5", e.getMessage());
            IllegalStateException closed = assertThrows(IllegalStateException.class, () -> kept[0].residentBytes(0, 8));
            assertTrue(closed.getMessage().contains("after close"), closed.getMessage());
            return null;
        });
    }

    /** Memory without the capability is refused with the transport and the structure's fix, before any format. */
    @Test
    void memoryWithoutTheCapabilityIsRefusedBeforeAnyFormat() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class,
                    () -> SharedMemories.createOnDevice(group, 64, "test structure", DeviceMaps.class, "kernel-run"
                            + " things", "a CUDA group", (memory, maps) -> fail("formatted"),
                            (memory, maps) -> fail("built")));
            assertEquals("test structure on transport=" + group.transport().capabilities(group).transport()
                    + ": its symmetric memory has no kernel-run things (DeviceMaps; fix: a CUDA group)", e.getMessage());
            return null;
        });
    }

    /** The device map on a host group: refused with the words it had before the set-up was shared. */
    @Test
    void theDeviceMapIsRefusedOnAHostGroup() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class,
                    () -> DeviceHashMap.create(group, 8, 16, 64));
            assertEquals("device hash map on transport=" + group.transport().capabilities(group).transport()
                    + ": its symmetric memory has no kernel-run map operations (DeviceMaps; fix:"
                    + " SymmetricHashMap.create on a host group, or a CUDA group)", e.getMessage());
            return null;
        });
    }
}
