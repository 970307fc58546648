package org.symmem4j.benchmarks;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * {@link ProcFootprint}: each mapping of an smaps file counts in exactly one part (shared memory, Java heap, other
 * files, other anonymous), the parts add up to the PSS, and this process's own numbers are plausible.
 */
class ProcFootprintTest {

    private static final List<String> SMAPS = List.of(
            "00400000-00401000 r-xp 00000000 08:01 42 /usr/lib/jvm/bin/java",
            "Size:                  4 kB",
            "Rss:                   4 kB",
            "Pss:                   2 kB",
            "VmFlags: rd ex mr mw me",
            "6c0000000-6c0100000 rw-p 00000000 00:00 0",
            "Rss:                 512 kB",
            "Pss:                 512 kB",
            "6c0100000-6c0200000 rw-p 00000000 00:00 0",
            "Rss:                 100 kB",
            "Pss:                 100 kB",
            "7f0000000000-7f0000100000 rw-s 00000000 00:1a 7 /dev/shm/symmem4j-run-1-rank0-segment",
            "Rss:                1024 kB",
            "Pss:                 256 kB",
            "7f0000100000-7f0000200000 rw-p 00000000 00:00 0                          [heap]",
            "Rss:                  64 kB",
            "Pss:                  64 kB",
            "7f0000200000-7f0000300000 r--p 00000000 08:01 9 /tmp/symmem4j-worker-0123456789abcdef.jsa",
            "Rss:                  40 kB",
            "Pss:                  10 kB");

    @Test
    void everyMappingCountsInOnePartAndThePartsAddUpToThePss() {
        // the heap is [0x6c0000000, 0x6c0100000): the second anonymous mapping lies above it
        ProcFootprint.Memory m = ProcFootprint.memory(SMAPS, new long[] {0x6c0000000L, 0x6c0100000L}, "/dev/shm/");
        assertEquals(new ProcFootprint.Memory(944, 256, 512, 12, 164, 1744), m);
        assertEquals(m.pssKb(), m.sharedMemoryKb() + m.javaHeapKb() + m.fileKb() + m.otherAnonKb());
        ProcFootprint.Memory unknownHeap = ProcFootprint.memory(SMAPS, null, "/dev/shm/");
        assertEquals(new ProcFootprint.Memory(944, 256, -1, 12, 676, 1744), unknownHeap);
        assertEquals(new ProcFootprint.Memory(1888, 512, -1, 24, 840, 3488),
                ProcFootprint.Memory.sum(List.of(m, unknownHeap)), "an unknown heap stays unknown in a sum");
        assertEquals(m, ProcFootprint.Memory.parse(("x " + m.format()).split(" "), 1));
    }

    @Test
    void thisProcessHasResidentMemoryAndUsedCpu() throws Exception {
        long pid = ProcessHandle.current().pid();
        ProcFootprint.Memory m = ProcFootprint.memory(pid, null);
        assertTrue(m.pssKb() > 10_000 && m.rssKb() >= m.pssKb() && m.fileKb() > 0, m.toString());
        assertEquals(m.pssKb(), m.sharedMemoryKb() + m.fileKb() + m.otherAnonKb(), m.toString());
        assertTrue(ProcFootprint.cpuTicks(pid) > 0, "a JVM that started has used CPU");
        assertEquals(50.0, ProcFootprint.percentOfCore(100, 2.0), 1e-12);
    }
}
