package org.symmem4j.parallel.affinity;

import java.util.BitSet;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.CpuList;

/**
 * Which CPU each rank of this machine is pinned to ({@code symmem4j.affinity}, {@code symmem4j.affinity.cpus}): made
 * and checked once before any rank starts ({@link #fromConfiguration}), then applied by each rank, to its own thread
 * ({@link #pinCurrentThread}) or to its whole process ({@link #pinProcess}). A rank's compute then stays on one core:
 * no migration between cores, and with {@link Mode#PHYSICAL_CORES} no two ranks on sibling hardware threads of one core
 * while there are cores enough.
 *
 * <p>{@link #OFF} pins nothing. Where the system cannot set affinity (not Linux), a requested pinning logs one line
 * and pins nothing.
 */
public final class RankAffinity {

    private static final Logger LOG = LoggerFactory.getLogger(RankAffinity.class);
    private static final AtomicBoolean WARNED_UNSUPPORTED = new AtomicBoolean();
    /** The plans logged so far: each once per JVM. */
    private static final Set<String> LOGGED = ConcurrentHashMap.newKeySet();

    /** The settings' modes. */
    public enum Mode {
        /** No pinning. */
        OFF,
        /** Ranks take the allowed CPUs by number. */
        CORES,
        /** Ranks take one hardware thread per physical core first. */
        PHYSICAL_CORES;

        /** {@return the mode a setting's value names: {@code off}, {@code cores}, {@code physical-cores}} */
        static Mode of(String value) {
            return valueOf(value.strip().toUpperCase(Locale.ROOT).replace('-', '_'));
        }

        /** {@return the setting's value for the mode} */
        public String value() {
            return name().toLowerCase(Locale.ROOT).replace('_', '-');
        }
    }

    /** Pins nothing. */
    public static final RankAffinity OFF = new RankAffinity(Mode.OFF, new int[0], "off");

    private final Mode mode;
    private final int[] cpuOfRank;
    private final String description;

    private RankAffinity(Mode mode, int[] cpuOfRank, String description) {
        this.mode = mode;
        this.cpuOfRank = cpuOfRank;
        this.description = description;
    }

    /**
     * The pinning the settings ask for, for {@code ranks} ranks on this machine, checked against the CPUs this process
     * may use and the system's topology: call it before any rank starts, so that bad settings fail first.
     *
     * @param ranks the ranks on this machine (thread mode: the world's size; process mode: {@code LOCAL_WORLD_SIZE})
     * @return the pinning, {@link #OFF} when the settings ask for none or the system cannot pin (logged)
     * @throws IllegalArgumentException when a setting is malformed, the CPU list names a CPU this process may not use,
     *                                  or there are fewer CPUs than ranks (each message names the fix)
     */
    public static RankAffinity fromConfiguration(int ranks) {
        return fromConfiguration(ranks, Configuration.Source.SYSTEM);
    }

    /**
     * As {@link #fromConfiguration(int)}, reading the settings from {@code source}.
     *
     * @param ranks  the ranks on this machine
     * @param source where the settings are read
     * @return the pinning
     */
    public static RankAffinity fromConfiguration(int ranks, Configuration.Source source) {
        List<Integer> cpus = Configuration.AFFINITY_CPUS.get(source);
        Mode mode = Configuration.AFFINITY.isSet(source) ? Mode.of(Configuration.AFFINITY.get(source))
                : cpus != null ? Mode.CORES : Mode.OFF;
        if (mode == Mode.OFF && cpus == null) {
            return OFF;
        }
        Optional<String> unsupported = CpuAffinity.unsupportedReason();
        if (unsupported.isPresent()) {
            if (mode != Mode.OFF && WARNED_UNSUPPORTED.compareAndSet(false, true)) {
                LOG.warn("symmem4j.affinity=" + mode.value() + " pins nothing here: " + unsupported.get());
            }
            if (mode != Mode.OFF) {
                return OFF;
            }
        }
        RankAffinity plan = plan(mode, cpus, ranks, mode == Mode.PHYSICAL_CORES && cpus == null ? CpuTopology.system()
                : null, mode == Mode.OFF ? new BitSet() : CpuAffinity.allowedCpus());
        if (LOGGED.add(plan.description)) {
            LOG.info("symmem4j.affinity=" + plan.description);
        }
        return plan;
    }

    /**
     * The pinning of {@code ranks} ranks: rank r on the r-th CPU of {@code cpus} when given, else of the mode's order
     * over {@code allowed}.
     *
     * @param mode     {@link Mode#CORES} or {@link Mode#PHYSICAL_CORES}; {@link Mode#OFF} only without a list
     * @param cpus     the CPU list override, null for none
     * @param ranks    the ranks on this machine, at least 1
     * @param topology the system's topology (needed by {@link Mode#PHYSICAL_CORES} without a list)
     * @param allowed  the CPUs this process may use
     * @return the pinning
     * @throws IllegalArgumentException when the list names a CPU outside {@code allowed}, a list is given with
     *                                  {@link Mode#OFF}, or there are fewer CPUs than ranks
     */
    public static RankAffinity plan(Mode mode, List<Integer> cpus, int ranks, CpuTopology topology, BitSet allowed) {
        if (ranks < 1) {
            throw new IllegalArgumentException("CPU affinity for ranks=" + ranks + "; expected at least 1 rank (fix: pass"
                    + " the number of ranks on this machine)");
        }
        if (mode == Mode.OFF) {
            if (cpus != null) {
                throw new IllegalArgumentException("invalid settings: -Dsymmem4j.affinity=off with -Dsymmem4j.affinity.cpus="
                        + CpuList.format(cpus) + ": a CPU list pins ranks, off pins none (fix: set symmem4j.affinity to"
                        + " cores, or unset symmem4j.affinity.cpus)");
            }
            return OFF;
        }
        List<Integer> order;
        String source;
        if (cpus != null) {
            for (int cpu : cpus) {
                if (!allowed.get(cpu)) {
                    throw new IllegalArgumentException("invalid setting: symmem4j.affinity.cpus=" + CpuList.format(cpus)
                            + " names cpu=" + cpu + ", which this process may not use: allowed=" + CpuList.format(allowed)
                            + " (sched_getaffinity: taskset, the cgroup's cpuset); expected CPUs of the allowed list"
                            + " (fix: name CPUs of " + CpuList.format(allowed) + ", or start the job with cpu " + cpu
                            + " allowed)");
                }
            }
            order = cpus;
            source = "symmem4j.affinity.cpus";
        } else {
            order = mode == Mode.CORES ? allowed.stream().boxed().toList() : topology.order(mode, allowed);
            source = "the allowed CPUs " + CpuList.format(allowed);
        }
        if (order.size() < ranks) {
            throw new IllegalArgumentException("CPU affinity: " + ranks + " ranks to pin but " + order.size() + " CPU(s) in "
                    + source + " (" + CpuList.format(order) + "); expected a CPU per rank (fix: run at most "
                    + order.size() + " ranks here, name more CPUs, or set symmem4j.affinity=off)");
        }
        int[] cpuOfRank = new int[ranks];
        for (int r = 0; r < ranks; r++) {
            cpuOfRank[r] = order.get(r);
        }
        StringBuilder d = new StringBuilder(mode.value()).append(cpus != null ? " (symmem4j.affinity.cpus)" : "")
                .append(": rank->cpu");
        for (int r = 0; r < ranks; r++) {
            d.append(r == 0 ? " " : ",").append(r).append("->").append(cpuOfRank[r]);
        }
        if (mode == Mode.PHYSICAL_CORES && cpus == null && ranks > topology.physicalCores()) {
            d.append(" (").append(ranks).append(" ranks on ").append(topology.physicalCores())
                    .append(" physical cores: some share a core's hardware threads)");
        }
        return new RankAffinity(mode, cpuOfRank, d.toString());
    }

    /** {@return whether this pins ranks} */
    public boolean enabled() {
        return mode != Mode.OFF;
    }

    /** {@return the mode} */
    public Mode mode() {
        return mode;
    }

    /** {@return how many ranks it pins (0 when off)} */
    public int ranks() {
        return cpuOfRank.length;
    }

    /**
     * {@return the CPU rank {@code rank} is pinned to}
     *
     * @param rank a rank on this machine
     */
    public int cpuOf(int rank) {
        if (rank < 0 || rank >= cpuOfRank.length) {
            throw new IllegalArgumentException("CPU affinity: rank=" + rank + " outside [0, " + cpuOfRank.length
                    + ") (fix: make the pinning for every rank of this machine)");
        }
        return cpuOfRank[rank];
    }

    /**
     * On rank {@code rank}'s own thread: pins it to its CPU (threads it starts later inherit that); nothing when off.
     *
     * @param rank the rank
     * @throws org.symmem4j.parallel.SymmemException when the kernel refuses
     */
    public void pinCurrentThread(int rank) {
        if (enabled()) {
            CpuAffinity.pinCurrentThread(cpuOf(rank));
        }
    }

    /**
     * Pins every thread of this process to rank {@code rank}'s CPU (a worker process of a group); nothing when off.
     *
     * @param rank the process's rank on this machine ({@code LOCAL_RANK})
     * @throws org.symmem4j.parallel.SymmemException when the kernel refuses
     */
    public void pinProcess(int rank) {
        if (enabled()) {
            BitSet one = new BitSet();
            one.set(cpuOf(rank));
            int threads = CpuAffinity.pinProcess(one);
            LOG.info("symmem4j.affinity: this process (local rank " + rank + ", " + threads + " threads) pinned to cpu "
                    + cpuOf(rank) + "; " + description);
        }
    }

    @Override
    public String toString() {
        return description;
    }
}
