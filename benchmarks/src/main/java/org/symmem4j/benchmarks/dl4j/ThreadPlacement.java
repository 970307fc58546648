package org.symmem4j.benchmarks.dl4j;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.symmem4j.parallel.CpuList;
import org.symmem4j.parallel.affinity.CpuTopology;

/**
 * Where a benchmark's worker threads ran, sampled from outside them: every few milliseconds a daemon thread reads
 * {@code /proc/self/task/<tid>/stat} of the threads whose kernel name starts with a prefix (the CPU each last ran on,
 * field 39, and its CPU time), and counts per thread the CPUs seen and the moves between them, and per sample whether
 * two busy threads sat on one CPU or on two hardware threads of one physical core (sysfs siblings). Threads that used
 * less than a tenth of the busiest one's CPU time (an idle OpenMP pool thread a rank started, which inherits its name)
 * are left out. Linux only; elsewhere {@link #summary()} says it saw nothing.
 */
final class ThreadPlacement implements AutoCloseable {

    private static final long PERIOD_MILLIS = 5;

    private record Seen(TreeSet<Integer> cpus, int[] moves, int[] last, long[] cpuTicks) {
    }

    private final String prefix;
    private final Map<Integer, Seen> threads = new HashMap<>();
    private final Map<Integer, Integer> coreOf = new HashMap<>();
    private final List<int[]> samples = new ArrayList<>(); // per sample: tid, cpu, tid, cpu, ...
    private final Thread sampler;
    private volatile boolean stop;

    /**
     * Starts sampling.
     *
     * @param prefix the start of the threads' kernel names (a Java name's first 15 characters)
     */
    ThreadPlacement(String prefix) {
        this.prefix = prefix.length() > 15 ? prefix.substring(0, 15) : prefix;
        try {
            for (CpuTopology.Cpu c : CpuTopology.system().cpus()) {
                coreOf.put(c.id(), c.packageId() * 1_000_000 + c.siblings().getFirst());
            }
        } catch (RuntimeException e) {
            // no sysfs: sibling pairs are not counted
        }
        sampler = Thread.ofPlatform().daemon().name("thread-placement").start(this::run);
    }

    private void run() {
        while (!stop) {
            List<Integer> sample = new ArrayList<>();
            try (DirectoryStream<Path> tasks = Files.newDirectoryStream(Path.of("/proc/self/task"))) {
                for (Path task : tasks) {
                    try {
                        if (!Files.readString(task.resolve("comm")).strip().startsWith(prefix)) {
                            continue;
                        }
                        String stat = Files.readString(task.resolve("stat"));
                        // fields after the comm's closing parenthesis: state is field 3, utime 14, stime 15, processor 39
                        String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
                        int cpu = Integer.parseInt(f[39 - 3]);
                        long ticks = Long.parseLong(f[14 - 3]) + Long.parseLong(f[15 - 3]);
                        int tid = Integer.parseInt(task.getFileName().toString());
                        synchronized (this) {
                            Seen s = threads.computeIfAbsent(tid, k -> new Seen(new TreeSet<>(), new int[1],
                                    new int[] {-1}, new long[1]));
                            if (s.last()[0] >= 0 && s.last()[0] != cpu) {
                                s.moves()[0]++;
                            }
                            s.last()[0] = cpu;
                            s.cpus().add(cpu);
                            s.cpuTicks()[0] = ticks;
                        }
                        sample.add(tid);
                        sample.add(cpu);
                    } catch (IOException | RuntimeException ended) {
                        // the thread ended while listed
                    }
                }
            } catch (IOException e) {
                return; // no procfs
            }
            synchronized (this) {
                samples.add(sample.stream().mapToInt(Integer::intValue).toArray());
            }
            try {
                Thread.sleep(PERIOD_MILLIS);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    @Override
    public void close() {
        stop = true;
        try {
            sampler.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * {@return per busy thread the CPUs it was seen on and its moves, and the share of samples with two busy threads on
     * one CPU or on sibling hardware threads of one core}
     */
    synchronized String summary() {
        long max = threads.values().stream().mapToLong(s -> s.cpuTicks()[0]).max().orElse(0);
        Map<Integer, Seen> busy = new TreeMap<>();
        threads.forEach((tid, s) -> {
            if (s.cpuTicks()[0] * 10 >= max) {
                busy.put(tid, s);
            }
        });
        if (busy.isEmpty() || samples.isEmpty()) {
            return "no samples";
        }
        int shared = 0;
        int siblings = 0;
        for (int[] sample : samples) {
            Map<Integer, Integer> perCpu = new HashMap<>();
            Map<Integer, Integer> perCore = new HashMap<>();
            for (int i = 0; i < sample.length; i += 2) {
                if (busy.containsKey(sample[i])) {
                    perCpu.merge(sample[i + 1], 1, Integer::sum);
                    perCore.merge(coreOf.getOrDefault(sample[i + 1], -1 - sample[i + 1]), 1, Integer::sum);
                }
            }
            boolean sharedCpu = perCpu.values().stream().anyMatch(n -> n > 1);
            shared += sharedCpu ? 1 : 0;
            siblings += !sharedCpu && perCore.values().stream().anyMatch(n -> n > 1) ? 1 : 0;
        }
        StringBuilder s = new StringBuilder();
        s.append(busy.size()).append(" busy threads, ").append(samples.size()).append(" samples every ")
                .append(PERIOD_MILLIS).append(" ms: CPUs (moves) per thread ");
        boolean first = true;
        for (Seen seen : busy.values()) {
            s.append(first ? "" : ", ").append(CpuList.format(List.copyOf(seen.cpus())))
                    .append(" (").append(seen.moves()[0]).append(')');
            first = false;
        }
        return s.append(String.format(Locale.ROOT, "; two on one CPU in %.1f %% of samples, on sibling hardware threads"
                + " of one core in %.1f %%", 100.0 * shared / samples.size(), 100.0 * siblings / samples.size()))
                .toString();
    }
}
