package org.symmem4j.benchmarks;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.symmem4j.parallel.host.SharedMemoryFiles;

/**
 * What a process on this Linux host holds and spends, read from {@code /proc}: its proportional set size split by what
 * the mappings hold ({@code /proc/<pid>/smaps}), and its CPU time ({@code /proc/<pid>/stat}).
 *
 * <p>PSS charges each resident page to the processes that map it in equal parts, so the PSS summed over a set of
 * processes counts a page they share once: the model weights and rings in shared memory, the pages of a shared
 * library or of a CDS archive that every JVM maps. The split:
 * <ul>
 *   <li><b>shared memory</b>: mappings of files in the symmetric-memory directory ({@link SharedMemoryFiles#directory()},
 *       {@code /dev/shm}): the weights a router shares with its worker processes, and the rings;</li>
 *   <li><b>Java heap</b>: anonymous memory inside the JVM's heap reservation, whose address and size the JVM logs at
 *       start with {@link #heapLogFlag} (absent when it was not started with it);</li>
 *   <li><b>file-backed</b>: every other mapped file: the JDK's and ND4J's native libraries, jars, the CDS archives;</li>
 *   <li><b>other anonymous</b>: the rest: metaspace and class space, the JIT's code cache, thread stacks, malloc
 *       arenas, ND4J's off-heap arrays and workspaces (a router thread's shared weights too: off-heap, not a file).</li>
 * </ul>
 */
final class ProcFootprint {

    /**
     * A JVM flag that makes the JVM write its heap's address and size to {@code heap-<pid>.log} in {@code dir}; see
     * {@link #memory(long, Path)}.
     */
    static String heapLogFlag(Path dir) {
        return "-Xlog:gc+heap+coops=debug:file=" + dir.resolve("heap-%p.log");
    }

    /** Clock ticks per second of {@code /proc/<pid>/stat}'s times (USER_HZ, 100 on Linux). */
    static final long TICKS_PER_SECOND = 100;

    private static final Pattern HEAP = Pattern.compile("Heap address: 0x([0-9a-fA-F]+), size: (\\d+) MB");

    private ProcFootprint() {
    }

    /**
     * A process's PSS and its split, in KiB; {@code javaHeapKb} is -1 when the heap's range is unknown (then the heap
     * counts in {@code otherAnonKb}).
     */
    record Memory(long pssKb, long sharedMemoryKb, long javaHeapKb, long fileKb, long otherAnonKb, long rssKb) {

        /** {@return the sum of a set of processes' memory, field by field (an unknown heap stays unknown)} */
        static Memory sum(List<Memory> all) {
            long pss = 0, shm = 0, heap = 0, file = 0, other = 0, rss = 0;
            boolean heapKnown = true;
            for (Memory m : all) {
                pss += m.pssKb;
                shm += m.sharedMemoryKb;
                heapKnown &= m.javaHeapKb >= 0;
                heap += Math.max(0, m.javaHeapKb);
                file += m.fileKb;
                other += m.otherAnonKb;
                rss += m.rssKb;
            }
            return new Memory(pss, shm, heapKnown ? heap : -1, file, other, rss);
        }

        /** {@return the fields as one line of numbers, as {@link #parse} reads them} */
        String format() {
            return pssKb + " " + sharedMemoryKb + " " + javaHeapKb + " " + fileKb + " " + otherAnonKb + " " + rssKb;
        }

        static Memory parse(String[] p, int from) {
            return new Memory(Long.parseLong(p[from]), Long.parseLong(p[from + 1]), Long.parseLong(p[from + 2]),
                    Long.parseLong(p[from + 3]), Long.parseLong(p[from + 4]), Long.parseLong(p[from + 5]));
        }
    }

    /**
     * {@return the memory of process {@code pid}, its Java heap found through the log that {@link #heapLogFlag} made
     * it write in {@code heapLogDir} (null or no log: heap unknown)}
     */
    static Memory memory(long pid, Path heapLogDir) throws IOException {
        long[] heap = heapLogDir == null ? null : heapRange(heapLogDir.resolve("heap-" + pid + ".log"));
        return memory(Files.readAllLines(Path.of("/proc", Long.toString(pid), "smaps")), heap,
                SharedMemoryFiles.directory().toString() + "/");
    }

    /**
     * {@return the memory that the lines of an smaps file describe}
     *
     * @param heap   [start, end) of the Java heap, or null when unknown
     * @param shmDir the symmetric-memory directory, ending in "/"
     */
    static Memory memory(List<String> smaps, long[] heap, String shmDir) {
        long pss = 0, shm = 0, javaHeap = 0, file = 0, other = 0, rss = 0;
        int kind = 0; // of the mapping whose fields follow: 0 other anonymous, 1 shared memory, 2 heap, 3 file
        for (String line : smaps) {
            int colon = line.indexOf(':');
            if (colon > 0 && !line.substring(0, colon).contains("-")) { // a field "Name:   123 kB"
                boolean isPss = line.startsWith("Pss:");
                if (!isPss && !line.startsWith("Rss:")) {
                    continue;
                }
                long kb = Long.parseLong(line.substring(colon + 1).replace("kB", "").trim());
                if (!isPss) {
                    rss += kb;
                    continue;
                }
                pss += kb;
                switch (kind) {
                    case 1 -> shm += kb;
                    case 2 -> javaHeap += kb;
                    case 3 -> file += kb;
                    default -> other += kb;
                }
                continue;
            }
            // a mapping: "start-end perms offset dev inode [path]"
            String[] p = line.trim().split("\\s+", 6);
            String path = p.length == 6 ? p[5] : "";
            long start = Long.parseUnsignedLong(p[0].substring(0, p[0].indexOf('-')), 16);
            if (path.startsWith(shmDir)) {
                kind = 1;
            } else if (path.startsWith("/")) {
                kind = 3;
            } else if (heap != null && start >= heap[0] && start < heap[1]) {
                kind = 2;
            } else {
                kind = 0;
            }
        }
        return new Memory(pss, shm, heap == null ? -1 : javaHeap, file, other, rss);
    }

    /** {@return [start, end) of the heap the JVM logged in {@code log}, or null without the log} */
    private static long[] heapRange(Path log) throws IOException {
        if (!Files.exists(log)) {
            return null;
        }
        Matcher m = HEAP.matcher(Files.readString(log));
        if (!m.find()) {
            return null;
        }
        long start = Long.parseUnsignedLong(m.group(1), 16);
        return new long[] {start, start + Long.parseLong(m.group(2)) * 1024 * 1024};
    }

    /** {@return the CPU time, user plus system, that process {@code pid} has used so far, in clock ticks} */
    static long cpuTicks(long pid) throws IOException {
        String stat = Files.readString(Path.of("/proc", Long.toString(pid), "stat"));
        // "pid (comm) state ppid ...": comm may hold spaces, so split after its closing parenthesis; utime and stime
        // are fields 14 and 15, the 12th and 13th after the state
        String[] p = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
        return Long.parseLong(p[11]) + Long.parseLong(p[12]);
    }

    /** {@return CPU ticks used over a window of {@code seconds}, as a percentage of one core} */
    static double percentOfCore(long ticks, double seconds) {
        return 100.0 * ticks / TICKS_PER_SECOND / seconds;
    }
}
