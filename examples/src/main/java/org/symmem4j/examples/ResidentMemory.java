package org.symmem4j.examples;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.management.ObjectName;
import org.bytedeco.javacpp.Pointer;
import org.nd4j.linalg.api.memory.AllocationsTracker;
import org.nd4j.linalg.api.memory.enums.AllocationKind;
import org.symmem4j.parallel.memory.MallocHeap;

/**
 * Where this process's resident memory is, at one moment, by what holds it: the mappings of {@code /proc/self/smaps}
 * (shared memory files, other files, thread stacks, anonymous memory), the C allocator's arenas and large blocks in
 * use and freed-but-kept ({@link MallocHeap}), the JVM's own parts as its native memory tracking reports them
 * (Java heap, classes, code, threads, GC, compiler; only with {@code -XX:NativeMemoryTracking=summary}), and ND4J's
 * own counters (its constant and shape-information caches, workspaces). What
 * {@link PipelineMemoryCapExample} prints per phase with {@code --memory-detail}, so that a rank's growth can be
 * accounted for part by part.
 */
final class ResidentMemory {

    private static final Pattern NMT_CATEGORY =
            Pattern.compile("^-\\s+(.+?) \\(reserved=(\\d+)KB, committed=(\\d+)KB\\)");
    private static final Pattern NMT_MALLOC = Pattern.compile("^\\s+malloc: (\\d+)KB");

    /**
     * One snapshot, in bytes.
     *
     * @param physical  JavaCPP's {@code Pointer.physicalBytes()} (the resident set the cap compares)
     * @param rss       the resident set from smaps, every mapping
     * @param shm       of that, mappings of files under /dev/shm (the group's symmetric memory and stage links)
     * @param files     of that, mappings of other files (libraries, jars, the CDS archive)
     * @param stacks    of that, the main thread's stack mapping ([stack]); other threads' stacks are anonymous
     * @param anon      of that, every anonymous mapping ([heap] included): Java heap, metaspace, code cache, malloc
     * @param malloc    the C allocator's state, or null where unavailable
     * @param nmt       the JVM's categories (committed bytes), empty without native memory tracking
     * @param nmtMalloc the JVM's own malloc'd bytes (in {@code malloc}'s in-use bytes too), -1 without tracking
     * @param nd4jConstant ND4J's constant and shape-information caches ({@code AllocationKind.CONSTANT})
     * @param nd4jWorkspace ND4J's workspaces ({@code AllocationKind.WORKSPACE})
     * @param threads   the process's threads (/proc/self/status)
     * @param bigAnon   the largest anonymous mappings' resident bytes and sizes, "rss/size", largest first
     */
    record Snapshot(long physical, long rss, long shm, long files, long stacks, long anon, MallocHeap.Info malloc,
                    Map<String, Long> nmt, long nmtMalloc, long nd4jConstant, long nd4jWorkspace, int threads,
                    List<String> bigAnon) {

        String format(String who, String phase) {
            StringBuilder b = new StringBuilder();
            b.append(String.format(Locale.ROOT, "%s memory %s: physical %d rss %d anon %d shm %d files %d stack %d"
                    + " threads %d", who, phase, physical, rss, anon, shm, files, stacks, threads));
            if (malloc != null) {
                b.append(String.format(Locale.ROOT, "; malloc arenas %d mapped %d inUse %d free %d",
                        malloc.arenaBytes(), malloc.mappedBytes(), malloc.inUseBytes(), malloc.freeBytes()));
            }
            b.append(String.format(Locale.ROOT, "; nd4j constant %d workspace %d", nd4jConstant, nd4jWorkspace));
            if (!nmt.isEmpty()) {
                b.append("; nmt malloc ").append(nmtMalloc);
                nmt.forEach((k, v) -> b.append(", ").append(k.replace(' ', '_')).append(' ').append(v));
            }
            if (!bigAnon.isEmpty()) {
                b.append("; largest anon (rss/size) ").append(String.join(" ", bigAnon));
            }
            return b.toString();
        }
    }

    private ResidentMemory() {
    }

    static Snapshot now() {
        long physical = Pointer.physicalBytes();
        long rss = 0;
        long shm = 0;
        long files = 0;
        long stacks = 0;
        long anon = 0;
        List<long[]> anonMappings = new ArrayList<>();
        try {
            int kind = 0; // of the mapping whose fields follow: 0 anonymous, 1 shared memory, 2 file, 3 stack
            long size = 0;
            for (String line : Files.readAllLines(Path.of("/proc/self/smaps"))) {
                int colon = line.indexOf(':');
                if (colon > 0 && !line.substring(0, colon).contains("-")) {
                    if (!line.startsWith("Rss:")) {
                        continue;
                    }
                    long bytes = 1024 * Long.parseLong(line.substring(colon + 1).replace("kB", "").trim());
                    rss += bytes;
                    switch (kind) {
                        case 1 -> shm += bytes;
                        case 2 -> files += bytes;
                        case 3 -> stacks += bytes;
                        default -> {
                            anon += bytes;
                            anonMappings.add(new long[] {bytes, size});
                        }
                    }
                    continue;
                }
                String[] p = line.trim().split("\\s+", 6);
                String path = p.length == 6 ? p[5] : "";
                String[] range = p[0].split("-");
                size = Long.parseUnsignedLong(range[1], 16) - Long.parseUnsignedLong(range[0], 16);
                kind = path.startsWith("/dev/shm/") ? 1 : path.startsWith("/") ? 2 : path.equals("[stack]") ? 3 : 0;
            }
        } catch (IOException e) {
            throw new IllegalStateException("cannot read /proc/self/smaps: " + e, e);
        }
        anonMappings.sort((a, b) -> Long.compare(b[0], a[0]));
        List<String> big = new ArrayList<>();
        for (int i = 0; i < Math.min(8, anonMappings.size()); i++) {
            big.add(anonMappings.get(i)[0] / 1024 + "K/" + anonMappings.get(i)[1] / 1024 + "K");
        }
        Map<String, Long> nmt = new LinkedHashMap<>();
        long nmtMalloc = -1;
        String summary = nmtSummary();
        for (String line : summary.split("\n")) {
            Matcher m = NMT_CATEGORY.matcher(line);
            if (m.find()) {
                nmt.put(m.group(1).trim(), 1024 * Long.parseLong(m.group(3)));
            } else if (nmtMalloc < 0) {
                Matcher mm = NMT_MALLOC.matcher(line);
                if (mm.find()) {
                    nmtMalloc = 1024 * Long.parseLong(mm.group(1)); // the first: the total's
                }
            }
        }
        AllocationsTracker tracker = AllocationsTracker.getInstance();
        return new Snapshot(physical, rss, shm, files, stacks, anon, MallocHeap.available() ? MallocHeap.info() : null,
                nmt, nmtMalloc, tracker.bytesOnDevice(AllocationKind.CONSTANT, 0),
                tracker.bytesOnDevice(AllocationKind.WORKSPACE, 0), threads(), big);
    }

    /** The JVM's native memory tracking summary, or "" when the JVM runs without it. */
    private static String nmtSummary() {
        try {
            Object out = ManagementFactory.getPlatformMBeanServer().invoke(
                    new ObjectName("com.sun.management:type=DiagnosticCommand"), "vmNativeMemory",
                    new Object[] {new String[] {"summary"}}, new String[] {String[].class.getName()});
            String s = String.valueOf(out);
            return s.contains("not enabled") ? "" : s;
        } catch (Exception e) {
            return "";
        }
    }

    private static int threads() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("Threads:")) {
                    return Integer.parseInt(line.substring(8).trim());
                }
            }
        } catch (IOException e) {
            return -1;
        }
        return -1;
    }
}
