package org.symmem4j.parallel;

import java.util.ArrayList;
import java.util.BitSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.SequencedSet;

/**
 * Linux's CPU list notation ({@code 0-3,8,10-11}), as sysfs's {@code thread_siblings_list}, {@code /proc/self/status}'s
 * {@code Cpus_allowed_list} and {@code taskset -c} write it. {@link #parse} keeps the order written (a rank pinning list
 * gives rank r the r-th CPU named), so a CPU named twice is an error.
 */
public final class CpuList {

    private CpuList() {
    }

    /**
     * The CPUs a list names, in the order written.
     *
     * @param text e.g. {@code 0-3,8}
     * @return the CPU numbers, each once
     * @throws IllegalArgumentException when the text is not a CPU list, or names a CPU twice
     */
    public static List<Integer> parse(String text) {
        SequencedSet<Integer> cpus = new LinkedHashSet<>();
        for (String part : text.strip().split(",", -1)) {
            String p = part.strip();
            int from;
            int to;
            try {
                int dash = p.indexOf('-', 1);
                from = Integer.parseInt(dash < 0 ? p : p.substring(0, dash));
                to = dash < 0 ? from : Integer.parseInt(p.substring(dash + 1));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("CPU list '" + text + "': '" + p + "' is not a CPU number or range"
                        + " (expected e.g. 0-3,8; fix: list CPU numbers and low-high ranges, comma-separated)", e);
            }
            if (from < 0 || to < 0) {
                throw new IllegalArgumentException("CPU list '" + text + "': CPU " + Math.min(from, to) + " is negative;"
                        + " expected CPU numbers >= 0 as in /proc/cpuinfo, e.g. 0-3,8 (fix: list this machine's CPUs)");
            }
            if (to < from) {
                throw new IllegalArgumentException("CPU list '" + text + "': range " + p + " runs backwards; expected"
                        + " low-high (fix: write " + to + "-" + from + ")");
            }
            for (int c = from; c <= to; c++) {
                if (!cpus.add(c)) {
                    throw new IllegalArgumentException("CPU list '" + text + "': CPU " + c + " is named twice; expected"
                            + " each CPU once (fix: remove the repeated CPU)");
                }
            }
        }
        return new ArrayList<>(cpus);
    }

    /**
     * The shortest list for {@code cpus} in their order: runs of consecutive ascending CPUs as ranges.
     *
     * @param cpus CPU numbers
     * @return e.g. {@code 0-3,8}; empty for none
     */
    public static String format(List<Integer> cpus) {
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

    /**
     * The CPUs of a set, as a list.
     *
     * @param cpus a set of CPU numbers
     * @return e.g. {@code 0-3,8}
     */
    public static String format(BitSet cpus) {
        return format(cpus.stream().boxed().toList());
    }
}
