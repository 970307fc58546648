package org.symmem4j.parallel.affinity;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import org.symmem4j.parallel.CpuList;
import org.symmem4j.parallel.SymmemException;

/**
 * Which logical CPUs are hardware threads of one physical core, and of which package (socket), as Linux's sysfs says:
 * {@code <cpu dir>/cpuN/topology/thread_siblings_list}, {@code core_id} and {@code physical_package_id}. A CPU without a
 * {@code topology} directory (offline) is left out; a missing file reads as a core of its own in package 0.
 *
 * <p>{@link #order} is the order in which ranks take CPUs: {@link RankAffinity.Mode#CORES} the allowed CPUs by number;
 * {@link RankAffinity.Mode#PHYSICAL_CORES} one hardware thread of every physical core first (the core's lowest allowed
 * CPU; cores by package, then core id), then the cores' second threads in the same order, and so on: two ranks share a
 * core only when there are more ranks than cores.
 */
public final class CpuTopology {

    /** The sysfs directory of the running system. */
    public static final Path SYSFS_CPUS = Path.of("/sys/devices/system/cpu");

    private static final Pattern CPU_DIR = Pattern.compile("cpu[0-9]+");

    /**
     * One logical CPU.
     *
     * @param id        its number
     * @param packageId its package ({@code physical_package_id})
     * @param coreId    its core's id in the package ({@code core_id})
     * @param siblings  the hardware threads of its core, itself included ({@code thread_siblings_list})
     */
    public record Cpu(int id, int packageId, int coreId, List<Integer> siblings) {
        /** Copies {@code siblings}. */
        public Cpu {
            siblings = List.copyOf(siblings);
        }

        /** The physical core's key: package, then its lowest hardware thread (core ids repeat across packages and dies). */
        long coreKey() {
            return ((long) packageId << 32) | siblings.stream().mapToInt(Integer::intValue).min().orElse(id);
        }
    }

    private final List<Cpu> cpus;

    private CpuTopology(List<Cpu> cpus) {
        this.cpus = List.copyOf(cpus);
    }

    /**
     * {@return the running system's topology (from {@link #SYSFS_CPUS})}
     *
     * @throws SymmemException when sysfs cannot be read
     */
    public static CpuTopology system() {
        return read(SYSFS_CPUS);
    }

    /**
     * Reads a topology from a sysfs CPU directory (the system's, or a recorded copy).
     *
     * @param cpuDir a directory of {@code cpuN/topology/} directories
     * @return the topology, CPUs by number
     * @throws SymmemException when the directory cannot be read, or holds a malformed file
     */
    public static CpuTopology read(Path cpuDir) {
        List<Cpu> cpus = new ArrayList<>();
        try (DirectoryStream<Path> dirs = Files.newDirectoryStream(cpuDir)) {
            for (Path dir : dirs) {
                String name = dir.getFileName().toString();
                if (!CPU_DIR.matcher(name).matches() || !Files.isDirectory(dir.resolve("topology"))) {
                    continue;
                }
                int id = Integer.parseInt(name.substring(3));
                Path topology = dir.resolve("topology");
                String siblings = text(topology.resolve("thread_siblings_list"));
                cpus.add(new Cpu(id, number(topology.resolve("physical_package_id"), 0),
                        number(topology.resolve("core_id"), id), siblings == null ? List.of(id) : CpuList.parse(siblings)));
            }
        } catch (IOException | IllegalArgumentException e) {
            throw new SymmemException("CPU topology: cannot read " + cpuDir + ": " + e.getMessage() + " (expected Linux's"
                    + " sysfs cpuN/topology files; fix: mount sysfs, or list the CPUs yourself with"
                    + " symmem4j.affinity.cpus)", e);
        }
        cpus.sort(Comparator.comparingInt(Cpu::id));
        return new CpuTopology(cpus);
    }

    /**
     * A topology from CPUs given directly (tests).
     *
     * @param cpus the CPUs
     * @return the topology, CPUs by number
     */
    public static CpuTopology of(List<Cpu> cpus) {
        List<Cpu> sorted = new ArrayList<>(cpus);
        sorted.sort(Comparator.comparingInt(Cpu::id));
        return new CpuTopology(sorted);
    }

    /** {@return the CPUs, by number} */
    public List<Cpu> cpus() {
        return cpus;
    }

    /** {@return how many physical cores (distinct packages and sibling sets) the CPUs belong to} */
    public int physicalCores() {
        return (int) cpus.stream().mapToLong(Cpu::coreKey).distinct().count();
    }

    /**
     * The order in which ranks take the allowed CPUs (see the class comment). An allowed CPU sysfs does not list counts
     * as a core of its own in package 0.
     *
     * @param mode    {@link RankAffinity.Mode#CORES} or {@link RankAffinity.Mode#PHYSICAL_CORES}
     * @param allowed the CPUs this process may use
     * @return the allowed CPUs in the order ranks take them
     */
    public List<Integer> order(RankAffinity.Mode mode, BitSet allowed) {
        if (mode == RankAffinity.Mode.CORES) {
            return allowed.stream().boxed().toList();
        }
        if (mode != RankAffinity.Mode.PHYSICAL_CORES) {
            throw new IllegalArgumentException("CPU order for mode=" + mode + "; expected CORES or PHYSICAL_CORES (fix:"
                    + " pin nothing for OFF)");
        }
        Map<Integer, Cpu> byId = new LinkedHashMap<>();
        for (Cpu c : cpus) {
            byId.put(c.id(), c);
        }
        // physical cores in package order, then core id; each core's allowed threads ascending
        Map<Long, List<Integer>> cores = new LinkedHashMap<>();
        List<Cpu> allowedCpus = allowed.stream().mapToObj(id -> byId.getOrDefault(id, new Cpu(id, 0, id, List.of(id))))
                .sorted(Comparator.comparingInt(Cpu::packageId).thenComparingInt(Cpu::coreId).thenComparingInt(Cpu::id))
                .toList();
        for (Cpu c : allowedCpus) {
            cores.computeIfAbsent(c.coreKey(), k -> new ArrayList<>()).add(c.id());
        }
        for (List<Integer> threads : cores.values()) {
            threads.sort(Integer::compare);
        }
        List<Integer> order = new ArrayList<>(allowed.cardinality());
        for (int round = 0; order.size() < allowed.cardinality(); round++) {
            for (List<Integer> threads : cores.values()) {
                if (round < threads.size()) {
                    order.add(threads.get(round));
                }
            }
        }
        return order;
    }

    private static String text(Path file) throws IOException {
        try {
            return Files.readString(file).strip();
        } catch (NoSuchFileException e) {
            return null;
        }
    }

    private static int number(Path file, int otherwise) throws IOException {
        String t = text(file);
        if (t == null) {
            return otherwise;
        }
        try {
            return Integer.parseInt(t);
        } catch (NumberFormatException e) {
            // error-message: a reader's reason, wrapped by read, whose message names the fix
            throw new IllegalArgumentException(file + " holds '" + t + "', expected a whole number", e);
        }
    }
}
