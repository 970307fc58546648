package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/** NVSHMEM's placement check, which runs without NVSHMEM: one process and one GPU per rank. */
class NvshmemPlacementTest {

    @Test
    void placementNeedsAProcessAndAGpuPerRank() {
        assertNull(NvshmemTransport.placementProblem(bytes("11 h/0000:18:00", "12 h/0000:2a:00")));
        assertNull(NvshmemTransport.placementProblem(bytes("11 h/0000:18:00")), "one rank in one process is fine");
        assertEquals("ranks 0 and 1 run in one process (pid 11)",
                NvshmemTransport.placementProblem(bytes("11 h/0000:18:00", "11 h/0000:2a:00")));
        assertEquals("ranks 1 and 2 share GPU h/0000:2a:00",
                NvshmemTransport.placementProblem(bytes("11 h/0000:18:00", "12 h/0000:2a:00", "13 h/0000:2a:00")));
        assertNull(NvshmemTransport.placementProblem(bytes("11 a/0000:18:00", "12 b/0000:18:00")),
                "the same PCI address on two machines is two GPUs");
    }

    private static List<byte[]> bytes(String... placements) {
        return java.util.Arrays.stream(placements).map(p -> p.getBytes(StandardCharsets.UTF_8)).toList();
    }
}
