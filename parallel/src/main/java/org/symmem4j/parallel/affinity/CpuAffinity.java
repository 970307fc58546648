package org.symmem4j.parallel.affinity;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.BitSet;
import java.util.HashSet;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;
import org.symmem4j.parallel.CpuList;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.SymmemException;

/**
 * Linux's CPU affinity calls through Java FFM: {@code sched_setaffinity}, {@code sched_getaffinity} and
 * {@code sched_getcpu} of the C library. A thread's mask is a {@code cpu_set_t}, an array of {@code unsigned long}
 * whose bit {@code c % 64} of word {@code c / 64} is CPU {@code c}; the calls take its size, which starts at 1,024 CPUs
 * (glibc's {@code CPU_SETSIZE}) and doubles while the kernel answers {@code EINVAL} for a mask too small for its CPUs.
 *
 * <p>On another system (no {@code sched_setaffinity} in the C library) {@link #unsupportedReason()} says why and every
 * other call throws; {@link RankAffinity} turns that into a log line and no pinning.
 */
public final class CpuAffinity {

    private static final int EINVAL = 22;
    private static final int MAX_CPUS = 1 << 16;
    private static final Linker LINKER = Linker.nativeLinker();
    private static final StructLayout CALL_STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CALL_STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final Linker.Option CAPTURE_ERRNO = Linker.Option.captureCallState("errno");

    /** {@code int sched_setaffinity(pid_t pid, size_t cpusetsize, const cpu_set_t *mask)}; null when absent. */
    private static final MethodHandle SET = function("sched_setaffinity",
            FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_LONG, ADDRESS), true);
    /** {@code int sched_getaffinity(pid_t pid, size_t cpusetsize, cpu_set_t *mask)}: glibc answers 0 on success. */
    private static final MethodHandle GET = function("sched_getaffinity",
            FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_LONG, ADDRESS), true);
    /** {@code int sched_getcpu(void)}: the CPU the calling thread runs on now. */
    private static final MethodHandle GETCPU = function("sched_getcpu", FunctionDescriptor.of(JAVA_INT), true);
    private static final MethodHandle STRERROR = function("strerror", FunctionDescriptor.of(ADDRESS, JAVA_INT), false);

    private CpuAffinity() {
    }

    private static MethodHandle function(String name, FunctionDescriptor d, boolean errno) {
        Optional<MemorySegment> symbol = LINKER.defaultLookup().find(name);
        if (symbol.isEmpty()) {
            return null;
        }
        return errno ? LINKER.downcallHandle(symbol.get(), d, CAPTURE_ERRNO) : LINKER.downcallHandle(symbol.get(), d);
    }

    /**
     * Why CPU affinity cannot be set here, or empty when it can (Linux's C library has the calls).
     *
     * @return the reason, naming the system
     */
    public static Optional<String> unsupportedReason() {
        if (SET != null && GET != null && GETCPU != null && System.getProperty("os.name", "").toLowerCase(Locale.ROOT)
                .contains("linux")) {
            return Optional.empty();
        }
        return Optional.of("CPU affinity needs Linux's sched_setaffinity, found os.name=" + System.getProperty("os.name")
                + " without it");
    }

    /**
     * The CPUs the calling thread may run on ({@code sched_getaffinity(0)}): what {@code taskset}, a cgroup's cpuset or
     * an earlier pinning left it.
     *
     * @return the allowed CPUs
     * @throws SymmemException when the call fails, or affinity is not supported here
     */
    public static BitSet allowedCpus() {
        return allowedCpus(0);
    }

    /**
     * The CPUs thread {@code tid} may run on.
     *
     * @param tid a thread id of this process ({@code /proc/self/task}), 0 for the calling thread
     * @return the allowed CPUs
     * @throws SymmemException when the call fails
     */
    public static BitSet allowedCpus(int tid) {
        requireSupported();
        for (int cpus = 1024; ; cpus *= 2) {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment mask = arena.allocate(cpus / 8, 8);
                MemorySegment state = arena.allocate(CALL_STATE);
                int rc = (int) GET.invokeExact(state, tid, (long) (cpus / 8), mask);
                if (rc == 0) {
                    return BitSet.valueOf(mask.toArray(JAVA_LONG));
                }
                int errno = (int) ERRNO.get(state, 0L);
                if (errno != EINVAL || cpus >= MAX_CPUS) {
                    throw failed("sched_getaffinity", tid, errno, "(fix: the thread may have ended; otherwise "
                            + Invariants.HOW_TO_REPORT + ")");
                }
            } catch (SymmemException e) {
                throw e;
            } catch (Throwable t) {
                throw Invariants.violated("sched_getaffinity failed: " + t, t);
            }
        }
    }

    /**
     * Lets thread {@code tid} run on {@code cpus} only ({@code sched_setaffinity}). Threads it starts afterwards
     * inherit the mask.
     *
     * @param tid  a thread id of this process, 0 for the calling thread
     * @param cpus the CPUs, at least one
     * @throws SymmemException when the kernel refuses (a CPU offline or outside the process's cpuset: {@code EINVAL})
     */
    public static void setAllowedCpus(int tid, BitSet cpus) {
        requireSupported();
        if (cpus.isEmpty()) {
            throw new IllegalArgumentException("CPU affinity: an empty CPU set for tid=" + tid + "; expected at least one"
                    + " CPU (fix: name the CPUs the thread may run on)");
        }
        int bits = Math.max(1024, Integer.highestOneBit(cpus.length()) * 2);
        long[] words = cpus.toLongArray();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mask = arena.allocate(bits / 8, 8);
            MemorySegment.copy(words, 0, mask, JAVA_LONG, 0, words.length);
            MemorySegment state = arena.allocate(CALL_STATE);
            int rc = (int) SET.invokeExact(state, tid, (long) (bits / 8), mask);
            if (rc != 0) {
                throw failed("sched_setaffinity", tid, (int) ERRNO.get(state, 0L), "cpus=" + CpuList.format(cpus)
                        + " (expected CPUs this process may use, online; fix: pin to CPUs of "
                        + CpuList.format(allowedCpus()) + ", or unset symmem4j.affinity.cpus)");
            }
        } catch (SymmemException e) {
            throw e;
        } catch (Throwable t) {
            throw Invariants.violated("sched_setaffinity failed: " + t, t);
        }
    }

    /**
     * Pins the calling thread to one CPU and checks that the kernel took it ({@code sched_getaffinity} answers exactly
     * that CPU).
     *
     * @param cpu the CPU
     * @throws SymmemException when the kernel refuses, or answers another mask
     */
    public static void pinCurrentThread(int cpu) {
        BitSet one = new BitSet();
        one.set(cpu);
        setAllowedCpus(0, one);
        BitSet now = allowedCpus(0);
        if (!now.equals(one)) {
            throw Invariants.violated("pinned the calling thread to cpu=" + cpu + " but sched_getaffinity answers "
                    + CpuList.format(now));
        }
    }

    /**
     * Pins every thread of this process to {@code cpus} ({@code /proc/self/task}, as {@code taskset -a -p}): the
     * listing repeats until a pass finds no thread it had not pinned, so a thread started meanwhile by an unpinned one is
     * caught; threads started by pinned threads inherit the mask.
     *
     * @param cpus the CPUs
     * @return how many threads were pinned
     * @throws SymmemException when the kernel refuses, or {@code /proc/self/task} cannot be read
     */
    public static int pinProcess(BitSet cpus) {
        Set<Integer> pinned = new HashSet<>();
        for (int pass = 0; pass < 100; pass++) {
            boolean fresh = false;
            try (DirectoryStream<Path> tasks = Files.newDirectoryStream(Path.of("/proc/self/task"))) {
                for (Path task : tasks) {
                    int tid = Integer.parseInt(task.getFileName().toString());
                    if (pinned.add(tid)) {
                        fresh = true;
                        try {
                            setAllowedCpus(tid, cpus);
                        } catch (SymmemException e) {
                            if (Files.exists(task)) {
                                throw e;
                            }
                            // the thread ended between the listing and the call: nothing to pin
                        }
                    }
                }
            } catch (IOException e) {
                throw new SymmemException("CPU affinity: cannot list this process's threads in /proc/self/task: " + e
                        + " (expected procfs mounted; fix: mount /proc, or unset symmem4j.affinity)", e);
            }
            if (!fresh) {
                return pinned.size();
            }
        }
        throw new SymmemException("CPU affinity: this process kept starting threads while its threads were pinned (100"
                + " passes over /proc/self/task); expected the thread count to settle (fix: pin before starting thread"
                + " pools, or unset symmem4j.affinity)");
    }

    /**
     * {@return the CPU the calling thread runs on now ({@code sched_getcpu}), or -1 where unknown}
     */
    public static int currentCpu() {
        if (GETCPU == null) {
            return -1;
        }
        try (Arena arena = Arena.ofConfined()) {
            return (int) GETCPU.invokeExact(arena.allocate(CALL_STATE));
        } catch (Throwable t) {
            throw Invariants.violated("sched_getcpu failed: " + t, t);
        }
    }

    private static void requireSupported() {
        Optional<String> why = unsupportedReason();
        if (why.isPresent()) {
            throw new SymmemException(why.get() + " (fix: leave symmem4j.affinity off on this system)");
        }
    }

    private static SymmemException failed(String call, int tid, int errno, String detail) {
        // error-message: detail names the fix (each caller passes one)
        return new SymmemException(call + "(tid=" + tid + ") failed: errno=" + errno + " " + strerror(errno) + " "
                + detail);
    }

    private static String strerror(int errno) {
        if (STRERROR == null) {
            return "";
        }
        try {
            return "(" + ((MemorySegment) STRERROR.invokeExact(errno)).reinterpret(256).getString(0) + ")";
        } catch (Throwable t) {
            return "";
        }
    }
}
