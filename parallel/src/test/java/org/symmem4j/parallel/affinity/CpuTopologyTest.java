package org.symmem4j.parallel.affinity;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.BitSet;
import java.util.List;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.CpuList;
import org.symmem4j.parallel.SymmemException;

/**
 * {@link CpuTopology} reads sysfs samples ({@code src/test/resources/sysfs-cpu/*.txt}, {@code grep .} dumps of the
 * {@code topology} files, written back into a directory tree here) and orders CPUs for ranks: one hardware thread per
 * physical core first.
 */
class CpuTopologyTest {

    @TempDir
    Path dir;

    /** Writes a {@code grep .} dump of {@code cpuN/topology/*} files into a directory tree and reads it. */
    private CpuTopology sample(String name) throws IOException {
        String text;
        try (InputStream in = CpuTopologyTest.class.getResourceAsStream("/sysfs-cpu/" + name + ".txt")) {
            text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
        Path root = dir.resolve(name);
        for (String line : text.split("\n")) {
            if (line.isBlank() || line.startsWith("#")) {
                continue;
            }
            int colon = line.indexOf(':');
            Path file = root.resolve(line.substring("/sys/devices/system/cpu/".length(), colon));
            Files.createDirectories(file.getParent());
            Files.writeString(file, line.substring(colon + 1) + "\n");
        }
        Files.createDirectories(root.resolve("cpufreq")); // sysfs's other entries are skipped
        return CpuTopology.read(root);
    }

    private static BitSet all(int n) {
        BitSet b = new BitSet();
        b.set(0, n);
        return b;
    }

    private static BitSet of(int... cpus) {
        BitSet b = new BitSet();
        IntStream.of(cpus).forEach(b::set);
        return b;
    }

    private static List<Integer> range(int from, int to) {
        return IntStream.range(from, to).boxed().toList();
    }

    @Test
    void twoWaySmtTakesOneThreadPerCoreBeforeAnySibling() throws IOException {
        CpuTopology t = sample("smt2-1socket-8c16t");
        assertEquals(16, t.cpus().size());
        assertEquals(8, t.physicalCores());
        assertEquals(List.of(0, 8), t.cpus().get(8).siblings());
        assertEquals(CpuList.parse("0-7,8-15"), t.order(RankAffinity.Mode.PHYSICAL_CORES, all(16)));
        assertEquals(range(0, 16), t.order(RankAffinity.Mode.CORES, all(16)));
        // a cpuset of two cores' four threads: both cores first
        assertEquals(List.of(1, 2, 9, 10), t.order(RankAffinity.Mode.PHYSICAL_CORES, of(1, 2, 9, 10)));
        // four ranks on that machine: four distinct cores, never a sibling pair
        List<Integer> four = t.order(RankAffinity.Mode.PHYSICAL_CORES, all(16)).subList(0, 4);
        assertEquals(4, four.stream().map(c -> c % 8).distinct().count());
    }

    @Test
    void adjacentSiblingsAreSpreadAcrossCores() throws IOException {
        CpuTopology t = sample("smt2-adjacent-4c8t");
        assertEquals(4, t.physicalCores());
        assertEquals(List.of(0, 2, 4, 6, 1, 3, 5, 7), t.order(RankAffinity.Mode.PHYSICAL_CORES, all(8)));
        // "cores" takes the CPUs by number: there, ranks 0 and 1 would share a core
        assertEquals(range(0, 8), t.order(RankAffinity.Mode.CORES, all(8)));
    }

    @Test
    void withoutSmtEveryCpuIsACore() throws IOException {
        CpuTopology t = sample("nosmt-16c");
        assertEquals(16, t.physicalCores());
        assertEquals(range(0, 16), t.order(RankAffinity.Mode.PHYSICAL_CORES, all(16)));
        assertEquals(List.of(3, 5, 7), t.order(RankAffinity.Mode.PHYSICAL_CORES, of(7, 3, 5)));
    }

    @Test
    void twoSocketsFillTheFirstPackageFirstAndCoreIdsRepeatingAcrossPackagesAreDistinctCores() throws IOException {
        CpuTopology t = sample("smt2-2socket-8c16t");
        assertEquals(1, t.cpus().get(4).packageId());
        assertEquals(0, t.cpus().get(4).coreId()); // the same core_id as cpu 0, another package
        assertEquals(8, t.physicalCores());
        assertEquals(range(0, 16), t.order(RankAffinity.Mode.PHYSICAL_CORES, all(16)));
        assertEquals(List.of(0, 4, 8, 12), t.order(RankAffinity.Mode.PHYSICAL_CORES, of(12, 8, 4, 0)));
        assertEquals(List.of(0, 1, 4, 8), t.order(RankAffinity.Mode.PHYSICAL_CORES, of(0, 1, 4, 8)));
    }

    @Test
    void theCapturedDevMachineReadsAsTwoCores() throws IOException {
        CpuTopology t = sample("captured-dev-2c");
        assertEquals(2, t.physicalCores());
        assertEquals(List.of(0, 1), t.order(RankAffinity.Mode.PHYSICAL_CORES, all(2)));
    }

    @Test
    void anAllowedCpuSysfsDoesNotListCountsAsACoreOfItsOwn() throws IOException {
        CpuTopology t = sample("smt2-adjacent-4c8t");
        assertEquals(List.of(0, 2, 9, 1), t.order(RankAffinity.Mode.PHYSICAL_CORES, of(0, 1, 2, 9)));
    }

    @Test
    void anOfflineCpuWithoutTopologyIsLeftOutAndAMalformedFileFailsWithTheFix() throws IOException {
        Path root = dir.resolve("odd");
        Files.createDirectories(root.resolve("cpu0/topology"));
        Files.writeString(root.resolve("cpu0/topology/core_id"), "0\n");
        Files.createDirectories(root.resolve("cpu1")); // offline: no topology directory
        CpuTopology t = CpuTopology.read(root);
        assertEquals(1, t.cpus().size());
        assertEquals(List.of(0), t.cpus().getFirst().siblings()); // a missing siblings file: a core of its own
        Files.writeString(root.resolve("cpu0/topology/core_id"), "zero\n");
        SymmemException e = assertThrows(SymmemException.class, () -> CpuTopology.read(root));
        assertTrue(e.getMessage().contains("core_id holds 'zero'") && e.getMessage().contains("fix:"), e.getMessage());
        assertThrows(SymmemException.class, () -> CpuTopology.read(root.resolve("absent")));
    }

    @Test
    void theSystemTopologyCoversTheAllowedCpus() {
        org.junit.jupiter.api.Assumptions.assumeTrue(CpuAffinity.unsupportedReason().isEmpty(), "not Linux");
        BitSet allowed = CpuAffinity.allowedCpus();
        CpuTopology t = CpuTopology.system();
        List<Integer> order = t.order(RankAffinity.Mode.PHYSICAL_CORES, allowed);
        assertEquals(allowed.cardinality(), order.size());
        assertEquals(allowed.stream().boxed().toList(), order.stream().sorted().toList());
    }
}
