package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Locale;

/** The machine line of the DL4J benchmark reports: CPU model and memory, from /proc on Linux. */
final class MachineInfo {

    private MachineInfo() {
    }

    /** The CPU's model name, or the architecture where /proc/cpuinfo is missing. */
    static String cpuModel() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"))) {
                if (line.startsWith("model name")) {
                    return line.substring(line.indexOf(':') + 1).trim();
                }
            }
        } catch (IOException | RuntimeException e) {
            // fall through: not Linux
        }
        return System.getProperty("os.arch") + " CPU";
    }

    /** Total memory as "24 GiB", or "? GiB" where /proc/meminfo is missing. */
    static String ramGiB() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/meminfo"))) {
                if (line.startsWith("MemTotal:")) {
                    long kib = Long.parseLong(Arrays.stream(line.split("\\s+")).skip(1).findFirst().orElseThrow());
                    return String.format(Locale.ROOT, "%.0f GiB", kib / 1048576.0);
                }
            }
        } catch (IOException | RuntimeException e) {
            // fall through: not Linux
        }
        return "? GiB";
    }
}
