package org.symmem4j.benchmarks;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Pins the spinning threads of a 2-process benchmark to CPUs named by {@code -Dsymmem4j.bench.cpus=A,B[,C]}: slot
 * {@link #PRODUCER} (rank 0's benchmark thread) to A, {@link #CONSUMER} (the peer's thread) to B, {@link #AERON_DRIVER}
 * (Aeron's media driver) to C. Every kind of a comparison then runs on the same cores, in every fork: unpinned, the
 * scheduler places the two processes on cores that share a cache in one fork and not in the next, and the forks of
 * one ring differ more than the rings do. Linux only, through {@code taskset} on the thread's id; without the property
 * (or with fewer CPUs than the slot) nothing is pinned. {@code bench/shared-state/run.sh} picks the CPUs from
 * {@code lscpu}: distinct cores that share a last-level cache, not CPU 0's.
 */
final class BenchCpus {

    static final int PRODUCER = 0;
    static final int CONSUMER = 1;
    static final int AERON_DRIVER = 2;

    /** The system property naming the CPUs, comma-separated. */
    static final String PROPERTY = "symmem4j.bench.cpus";

    private BenchCpus() {
    }

    /**
     * The CPUs named by {@link #PROPERTY}.
     *
     * @return CPU numbers, empty when the property is unset or blank
     * @throws IllegalArgumentException for anything but comma-separated CPU numbers
     */
    static int[] cpus() {
        String spec = System.getProperty(PROPERTY, "").trim();
        if (spec.isEmpty()) {
            return new int[0];
        }
        String[] parts = spec.split(",");
        int[] cpus = new int[parts.length];
        for (int i = 0; i < parts.length; i++) {
            try {
                cpus[i] = Integer.parseInt(parts[i].trim());
            } catch (NumberFormatException e) {
                cpus[i] = -1;
            }
            if (cpus[i] < 0) {
                throw new IllegalArgumentException(PROPERTY + "=" + spec + " expected comma-separated CPU numbers,"
                        + " found '" + parts[i] + "' (fix: pass e.g. -D" + PROPERTY + "=2,3,4, or leave it unset)");
            }
        }
        return cpus;
    }

    /**
     * Pins the calling thread to the CPU of {@code slot}, if the property names one.
     *
     * @param slot {@link #PRODUCER}, {@link #CONSUMER} or {@link #AERON_DRIVER}
     * @param what the thread, for the error
     * @throws IllegalStateException when {@code taskset} fails (not installed, or a CPU this process may not use)
     */
    static void pinCurrentThread(int slot, String what) {
        int[] cpus = cpus();
        if (slot >= cpus.length) {
            return;
        }
        String tid;
        try {
            // "<pid>/task/<tid>": the kernel's id of this thread, which taskset takes
            tid = Files.readSymbolicLink(Path.of("/proc/thread-self")).getFileName().toString();
            Process p = new ProcessBuilder("taskset", "-pc", Integer.toString(cpus[slot]), tid)
                    .redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
            int code = p.waitFor();
            if (code != 0) {
                throw new IllegalStateException("pinning " + what + " (thread " + tid + ") to CPU " + cpus[slot]
                        + ": taskset exit=" + code + ", expected 0: " + out + " (fix: name CPUs this process may use"
                        + " in -D" + PROPERTY + ", or leave it unset)");
            }
        } catch (IOException e) {
            throw new IllegalStateException("pinning " + what + " to CPU " + cpus[slot] + " needs Linux's"
                    + " /proc/thread-self and taskset: " + e + " (fix: install util-linux, or leave -D" + PROPERTY
                    + " unset)", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("pinning " + what + " to CPU " + cpus[slot] + " was interrupted while"
                    + " taskset ran (fix: do not interrupt the benchmark's set-up, or leave -D" + PROPERTY + " unset)", e);
        }
    }
}
