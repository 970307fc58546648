package org.symmem4j.launch;

import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;

/**
 * Linux's CPU list notation ({@code 0-3,8,10-11}), as {@code /proc/self/status}'s
 * {@code Cpus_allowed_list} prints it and {@code taskset -c} reads it.
 */
final class CpuList {

    private CpuList() {
    }

    /**
     * The CPUs a list names, ascending, each once.
     *
     * @param text e.g. {@code 0-3,8}
     * @return the CPU numbers
     * @throws IllegalArgumentException when the text is not a CPU list
     */
    static List<Integer> parse(String text) {
        TreeSet<Integer> cpus = new TreeSet<>();
        for (String part : text.trim().split(",")) {
            String p = part.trim();
            try {
                int dash = p.indexOf('-');
                if (dash < 0) {
                    cpus.add(nonNegative(Integer.parseInt(p), text));
                } else {
                    int from = nonNegative(Integer.parseInt(p.substring(0, dash)), text);
                    int to = nonNegative(Integer.parseInt(p.substring(dash + 1)), text);
                    if (to < from) {
                        throw new IllegalArgumentException("CPU list '" + text + "': range " + p + " runs backwards; expected"
                                + " low-high (fix: write " + to + "-" + from + ")");
                    }
                    for (int c = from; c <= to; c++) {
                        cpus.add(c);
                    }
                }
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("CPU list '" + text + "': '" + p + "' is not a CPU number or range"
                        + " (expected e.g. 0-3,8; fix: list CPU numbers and low-high ranges, comma-separated)", e);
            }
        }
        return new ArrayList<>(cpus);
    }

    private static int nonNegative(int cpu, String text) {
        if (cpu < 0) {
            throw new IllegalArgumentException("CPU list '" + text + "': CPU " + cpu + " is negative; expected CPU"
                    + " numbers >= 0 as in /proc/cpuinfo, e.g. 0-3,8 (fix: list this machine's CPUs, `nproc` counts them)");
        }
        return cpu;
    }

    /**
     * The shortest list for {@code cpus} (ascending): runs of consecutive CPUs as ranges.
     *
     * @param cpus ascending CPU numbers, at least one
     * @return e.g. {@code 0-3,8}
     */
    static String format(List<Integer> cpus) {
        StringBuilder b = new StringBuilder();
        int i = 0;
        while (i < cpus.size()) {
            int j = i;
            while (j + 1 < cpus.size() && cpus.get(j + 1) == cpus.get(j) + 1) {
                j++;
            }
            b.append(b.isEmpty() ? "" : ",").append(cpus.get(i));
            if (j > i) {
                b.append('-').append(cpus.get(j));
            }
            i = j + 1;
        }
        return b.toString();
    }
}
