package org.symmem4j.benchmarks;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.symmem4j.benchmarks.ServingProcessBench.SideRun;

/**
 * The report of {@link ServingProcessBench}: throughput and latency per model, side and worker count; the memory of
 * each side split by what it holds; at two or more worker counts, the largest against the smallest (the target:
 * resident memory of 8 workers within 1.2x one worker's); the CPU time of every JVM under load and idle; and the raw
 * numbers of every repetition.
 */
final class ServingProcessReport {

    private static final double MIB = 1024;

    private ServingProcessReport() {
    }

    static void report(ServingProcessBench.Flags f, List<SideRun> runs, long paramBytes) {
        List<Integer> ks = ServingProcessBench.workerCounts(f);
        throughput(f, runs, ks);
        memory(f, runs, ks, paramBytes);
        if (ks.size() > 1) {
            scaling(f, runs, ks);
        }
        cpu(f, runs, ks);
        raw(runs);
    }

    private static void throughput(ServingProcessBench.Flags f, List<SideRun> runs, List<Integer> ks) {
        System.out.printf("## Throughput and latency (one-row requests, %d clients, median of %d reps)%n%n"
                + "| model | side | workers | requests/s | p50 us | p99 us | failed | req/s vs ParallelInference |"
                + " all reps req/s |%n|---|---|---|---|---|---|---|---|---|%n", f.clients, f.reps);
        for (int k : ks) {
            for (int i = 0; i < f.models; i++) {
                String model = ServingProcessBench.name(i);
                Map<String, ServingBench.Cell> medians = new LinkedHashMap<>();
                for (String side : f.sides) {
                    medians.put(side, median(cellsOf(runs, side, k, model)));
                }
                ServingBench.Cell pi = medians.get("pi");
                for (String side : f.sides) {
                    List<ServingBench.Cell> all = cellsOf(runs, side, k, model);
                    ServingBench.Cell m = medians.get(side);
                    System.out.printf(Locale.ROOT, "| %s | %s | %d | %.0f | %.0f | %.0f | %d | %s | %s |%n", model,
                            ServingProcessBench.label(side), m.workers(), m.requestsPerSecond(), m.p50Micros(),
                            m.p99Micros(), all.stream().mapToLong(ServingBench.Cell::failures).sum(),
                            pi == null ? "-" : String.format(Locale.ROOT, "%.2fx", m.requestsPerSecond()
                                    / pi.requestsPerSecond()),
                            all.stream().map(c -> String.format(Locale.ROOT, "%.0f", c.requestsPerSecond())).toList());
                }
            }
        }
    }

    private static void memory(ServingProcessBench.Flags f, List<SideRun> runs, List<Integer> ks, long paramBytes) {
        System.out.printf(Locale.ROOT, "%n## Resident memory after serving and the idle window (PSS in MiB, summed over"
                + " each side's JVMs; the rep with the median total of %d)%n%n"
                + "What is compared: each side serving the same %d models (%.1f MiB of weights) with K workers:"
                + " threads = one JVM (the router, K worker threads, the clients); processes = the router's JVM (with"
                + " the clients) plus K worker JVMs; ParallelInference = one JVM (K workers per model, the clients)."
                + " PSS splits a page shared by n processes n ways, so the sum counts shared pages once: the weights"
                + " in shared memory, and the libraries and CDS archives every JVM maps.%n%n"
                + "| side | K | JVMs | PSS | shared memory (weights, rings) | Java heap | file-backed (libraries,"
                + " jars, CDS) | other anonymous (metaspace, code, stacks, malloc, ND4J off-heap) | vs"
                + " ParallelInference, same K |%n|---|---|---|---|---|---|---|---|---|%n", f.reps, f.models,
                paramBytes / 1048576.0);
        for (int k : ks) {
            SideRun pi = f.sides.contains("pi") ? medianRun(runs, "pi", k) : null;
            for (String side : f.sides) {
                SideRun r = medianRun(runs, side, k);
                ProcFootprint.Memory m = r.total();
                System.out.printf(Locale.ROOT, "| %s | %d | %d | %s | %s |%n", ServingProcessBench.label(side), k,
                        r.memory().size(), cells(m), pi == null ? "-" : String.format(Locale.ROOT, "%.2fx",
                                (double) m.pssKb() / pi.total().pssKb()));
            }
        }
        System.out.printf("%n### Each JVM (the same reps)%n%n| side | K | JVM | PSS | shared memory | Java heap |"
                + " file-backed | other anonymous | RSS |%n|---|---|---|---|---|---|---|---|---|%n");
        for (int k : ks) {
            for (String side : f.sides) {
                SideRun r = medianRun(runs, side, k);
                r.memory().forEach((jvm, m) -> System.out.printf(Locale.ROOT, "| %s | %d | %s | %s | %.1f |%n",
                        ServingProcessBench.label(side), k, jvm, cells(m), m.rssKb() / MIB));
            }
        }
    }

    /** {@code PSS | shm | heap | file | other} in MiB (heap "?" when unknown). */
    private static String cells(ProcFootprint.Memory m) {
        return String.format(Locale.ROOT, "%.1f | %.1f | %s | %.1f | %.1f", m.pssKb() / MIB, m.sharedMemoryKb() / MIB,
                m.javaHeapKb() < 0 ? "?" : String.format(Locale.ROOT, "%.1f", m.javaHeapKb() / MIB),
                m.fileKb() / MIB, m.otherAnonKb() / MIB);
    }

    private static void scaling(ServingProcessBench.Flags f, List<SideRun> runs, List<Integer> ks) {
        int lo = ks.stream().min(Integer::compare).orElseThrow();
        int hi = ks.stream().max(Integer::compare).orElseThrow();
        System.out.printf(Locale.ROOT, "%n## %d workers against %d: the memory of the same side serving the same"
                + " models (target: %d workers' PSS at most 1.2x %d worker's)%n%n| side | PSS, K=%d | PSS, K=%d |"
                + " ratio | per extra worker MiB | within 1.2x |%n|---|---|---|---|---|---|%n", hi, lo, hi, lo, lo,
                hi);
        for (String side : f.sides) {
            double a = medianRun(runs, side, lo).total().pssKb() / MIB;
            double b = medianRun(runs, side, hi).total().pssKb() / MIB;
            System.out.printf(Locale.ROOT, "| %s | %.1f | %.1f | %.2fx | %.1f | %s |%n", ServingProcessBench.label(side),
                    a, b, b / a, (b - a) / (hi - lo), b <= 1.2 * a ? "yes" : "no");
        }
    }

    private static void cpu(ServingProcessBench.Flags f, List<SideRun> runs, List<Integer> ks) {
        System.out.printf(Locale.ROOT, "%n## CPU time per JVM (/proc/<pid>/stat utime + stime, %d ticks/s; the rep"
                + " with the median total PSS)%n%nUnder load: while the clients sent requests to every model in turn"
                + " (the router's and the single JVMs' figures include the client threads). Idle: the %.1f s after,"
                + " without requests. In %% of one core.%n%n| side | K | JVM | under load, %% of a core | idle, %%"
                + " of a core | idle CPU ms | load window s | idle window s |%n|---|---|---|---|---|---|---|---|%n",
                ProcFootprint.TICKS_PER_SECOND, f.idleSeconds);
        for (int k : ks) {
            for (String side : f.sides) {
                SideRun r = medianRun(runs, side, k);
                long loadSum = 0;
                long idleSum = 0;
                for (Map.Entry<String, long[]> e : r.cpuTicks().entrySet()) {
                    long[] t = e.getValue();
                    loadSum += t[0];
                    idleSum += t[1];
                    cpuRow(side, k, e.getKey(), t[0], t[1], r);
                }
                if (r.cpuTicks().size() > 1) {
                    cpuRow(side, k, "all " + r.cpuTicks().size() + " JVMs", loadSum, idleSum, r);
                }
            }
        }
    }

    private static void cpuRow(String side, int k, String jvm, long load, long idle, SideRun r) {
        System.out.printf(Locale.ROOT, "| %s | %d | %s | %.1f | %.2f | %d | %.1f | %.1f |%n",
                ServingProcessBench.label(side), k, jvm, ProcFootprint.percentOfCore(load, r.loadSeconds()),
                r.idleSeconds() == 0 ? 0.0 : ProcFootprint.percentOfCore(idle, r.idleSeconds()),
                idle * 1000 / ProcFootprint.TICKS_PER_SECOND, r.loadSeconds(), r.idleSeconds());
    }

    private static void raw(List<SideRun> runs) {
        System.out.printf("%n## Raw (every rep; memory in KiB: pss shm heap file other rss; cpu in ticks: load idle)"
                + "%n%n");
        for (SideRun r : runs) {
            for (ServingBench.Cell c : r.cells()) {
                System.out.printf(Locale.ROOT, "raw %s K=%d %s workers=%d req/s=%.1f p50us=%.1f p99us=%.1f failed=%d%n",
                        r.side(), r.workers(), c.model(), c.workers(), c.requestsPerSecond(), c.p50Micros(),
                        c.p99Micros(), c.failures());
            }
            r.memory().forEach((jvm, m) -> System.out.printf("raw %s K=%d mem %s %s%n", r.side(), r.workers(), jvm,
                    m.format()));
            r.cpuTicks().forEach((jvm, t) -> System.out.printf("raw %s K=%d cpu %s %d %d%n", r.side(), r.workers(), jvm,
                    t[0], t[1]));
            System.out.printf(Locale.ROOT, "raw %s K=%d window load=%.3fs idle=%.3fs%n", r.side(), r.workers(),
                    r.loadSeconds(), r.idleSeconds());
        }
    }

    private static List<ServingBench.Cell> cellsOf(List<SideRun> runs, String side, int k, String model) {
        return runs.stream().filter(r -> r.side().equals(side) && r.workers() == k).flatMap(r -> r.cells().stream())
                .filter(c -> c.model().equals(model)).toList();
    }

    private static ServingBench.Cell median(List<ServingBench.Cell> cells) {
        List<ServingBench.Cell> sorted = new ArrayList<>(cells);
        sorted.sort(Comparator.comparingDouble(ServingBench.Cell::requestsPerSecond));
        return sorted.get(sorted.size() / 2);
    }

    /** {@return the rep of {@code side} at {@code k} workers with the median total PSS} */
    static SideRun medianRun(List<SideRun> runs, String side, int k) {
        List<SideRun> sorted = new ArrayList<>(runs.stream().filter(r -> r.side().equals(side) && r.workers() == k)
                .toList());
        sorted.sort(Comparator.comparingLong(r -> r.total().pssKb()));
        return sorted.get(sorted.size() / 2);
    }
}
