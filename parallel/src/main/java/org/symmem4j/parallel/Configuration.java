package org.symmem4j.parallel;

import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.Supplier;
import org.slf4j.LoggerFactory;

/**
 * Every setting symmem4j reads from system properties and the environment, in one place (as Aeron's
 * {@code Configuration}): its name, environment variable, type, default, accepted values and meaning. The
 * reference in {@code docs/configuration.md} is generated from this class ({@code ConfigurationDocs} in the
 * test sources; {@code ConfigurationDocsTest} fails when the file is out of date).
 *
 * <p><b>Names.</b> Properties are dotted lowercase ({@code symmem4j.tp.chunk.rows}); the environment variable
 * of a property is its name in capitals with dots as underscores ({@code SYMMEM4J_TP_CHUNK_ROWS}). <b>The
 * system property wins over the environment variable</b> when both are set. A few camelCase names of earlier
 * versions ({@code symmem4j.tp.chunkRows}, ...) still work as deprecated aliases: each logs a warning once per
 * JVM naming the new name. A blank value counts as unset. The job's identity and secret
 * ({@link #RUN_ID}, {@link #SECRET}, {@link #SECRET_FILE}, {@link #NODE_ID}, {@link #RESTART_GENERATION},
 * {@link #MEMBERSHIP_FILE}) are
 * environment variables only, the contract between a launcher and its processes.
 *
 * <p><b>Bad values fail.</b> A value that is not one of those accepted fails with an
 * {@link IllegalArgumentException} naming the setting, the value found and what is accepted
 * ({@code invalid setting: -Dsymmem4j.timeout.ms=abc expected=a positive whole number of milliseconds ...}),
 * at the first read, and at the latest when a group is created ({@link #validate()}, called by the groups'
 * factories), never silently ignored.
 *
 * <p><b>Unknown names warn.</b> A {@code symmem4j.*} system property or {@code SYMMEM4J_*} environment variable that
 * symmem4j does not know ({@link KnownSettings}: a misspelt name, one of another version) is named, with the closest
 * known name, in one warning per JVM when the first group is created; {@link #UNKNOWN_SETTINGS} {@code =error}
 * refuses it instead. A warning by default: a job's scripts may carry settings of a newer or older version, which
 * must not stop it.
 *
 * <p><b>Experimental</b> settings ({@link Setting#experimental()}) exist to reproduce a problem, to compare an
 * alternative or to tune; their names and meanings may change without notice.
 *
 * <p>Settings are read when used, not cached here: a few are read once per JVM by their users (noted in their
 * descriptions), the rest at each use.
 */
public final class Configuration {

    /** Every setting in declaration order; filled by {@link Setting}'s builder, so it must come first. */
    private static final List<Setting<?>> ALL = new ArrayList<>();

    // ---------------------------------------------------------------- groups and waits

    /**
     * {@code symmem4j.timeout.ms}: the bound of every wait for a peer in groups made with
     * {@link GroupOptions#defaults()} ({@code ProcessGroup.fromEnvironment()}, {@code InJvmWorld.create(n)}).
     */
    public static final Setting<Duration> TIMEOUT = Setting.property("symmem4j.timeout.ms")
            .type("milliseconds")
            .accepts("a positive whole number of milliseconds")
            .describedAs("the bound of every wait for a peer in groups made with `GroupOptions.defaults()`"
                    + " (`ProcessGroup.fromEnvironment()`, `InJvmWorld.create(n)`); a wait past it fails on every"
                    + " waiting rank with a `PeerTimeoutException` naming the missing ranks. The DL4J trainers'"
                    + " builders default to it too (in thread mode their `timeout(...)` overrides it; in group mode"
                    + " they take the group's timeout and refuse a different one)")
            .build(Duration.ofSeconds(60), "`60000` (60 s)", value -> {
                long ms = Long.parseLong(value.strip());
                if (ms <= 0) {
                    // error-message: a parser's reason, wrapped by Setting.parse, whose message names the fix
                    throw new NumberFormatException("not positive");
                }
                return Duration.ofMillis(ms);
            });

    /** {@code symmem4j.shm.dir}: where cross-process groups create their shared-memory files (null: the default). */
    public static final Setting<Path> SHM_DIR = Setting.property("symmem4j.shm.dir")
            .type("path")
            .accepts("a directory")
            .describedAs("where cross-process groups create their shared-memory files")
            .build(null, "`/dev/shm`, else `java.io.tmpdir`", Path::of);

    // ---------------------------------------------------------------- the job's identity (environment only)

    /** {@code SYMMEM4J_RUN_ID}: the job's id, equal on every rank (torchrun's {@code TORCHELASTIC_RUN_ID} when unset). */
    public static final Setting<String> RUN_ID = Setting.environment("SYMMEM4J_RUN_ID")
            .type("string")
            .accepts("1 to 128 characters of letters, digits and `. _ : @ + -`")
            .describedAs("the job's id, equal on every rank (else torchrun's `TORCHELASTIC_RUN_ID`); the store"
                    + " refuses ranks of another run. `symmem4j-run` sets it")
            .build(null, "`ppid-<parent pid>-<parent start ms>`", String::strip);

    /** {@code SYMMEM4J_SECRET}: the job's store secret itself. */
    public static final Setting<String> SECRET = Setting.environment("SYMMEM4J_SECRET")
            .type("string")
            .accepts("at least 16 bytes of UTF-8")
            .describedAs("the job's store secret; this or the next is required when the store is not on loopback")
            .build(null, "unset: on loopback, rank 0 generates one in the secret directory", value -> value);

    /** {@code SYMMEM4J_SECRET_FILE}: a file holding the job's store secret. */
    public static final Setting<Path> SECRET_FILE = Setting.environment("SYMMEM4J_SECRET_FILE")
            .type("path")
            .accepts("a file of mode 0600 (owner only)")
            .describedAs("a file holding the job's store secret (`symmem4j-run` writes one)")
            .build(null, "unset", Path::of);

    /** {@code symmem4j.secret.dir}: the directory of the secret rank 0 generates on loopback (null: the default). */
    public static final Setting<Path> SECRET_DIR = Setting.property("symmem4j.secret.dir")
            .type("path")
            .accepts("a directory only this user can write")
            .describedAs("the directory of the store secret rank 0 generates when the store is on loopback and no"
                    + " secret is given")
            .build(null, "`$XDG_RUNTIME_DIR/symmem4j/`, else `<java.io.tmpdir>/symmem4j-<uid>/`", Path::of);

    /** {@code SYMMEM4J_NODE_ID}: this rank's machine identity in multi-node groups. */
    public static final Setting<String> NODE_ID = Setting.environment("SYMMEM4J_NODE_ID")
            .type("string")
            .accepts("any non-blank string")
            .describedAs("this rank's machine identity for `NodeTopology` (which ranks share a machine in"
                    + " multi-node groups): containers with one host name each on one machine")
            .build(null, "the host name (`/proc/sys/kernel/hostname`)", String::strip);

    /** {@code SYMMEM4J_RESTART_GENERATION}: which start of the job this process belongs to (0: the first). */
    public static final Setting<Integer> RESTART_GENERATION = Setting.environment("SYMMEM4J_RESTART_GENERATION")
            .type("integer")
            .accepts("a whole number >= 0")
            .describedAs("which start of the job this process belongs to: 0 for the first, g after the launcher's"
                    + " g-th restart (`symmem4j-run --max-restarts`, which also sets torchrun's"
                    + " `TORCHELASTIC_RESTART_COUNT`); each start has its own run id and secret")
            .build(0, "`0`", value -> {
                int g = Integer.parseInt(value.strip());
                if (g < 0) {
                    // error-message: a parser's reason, wrapped by Setting.parse, whose message names the fix
                    throw new NumberFormatException("negative");
                }
                return g;
            });

    /** {@code SYMMEM4J_MEMBERSHIP_FILE}: where the launcher announces dead ranks with {@code --on-failure shrink}. */
    public static final Setting<Path> MEMBERSHIP_FILE = Setting.environment("SYMMEM4J_MEMBERSHIP_FILE")
            .type("path")
            .accepts("a file the launcher writes")
            .describedAs("where `symmem4j-run --on-failure shrink` lists the job's dead ranks (one `dead <rank> <how>`"
                    + " line each, replaced atomically); a process group started with it can shrink in place"
                    + " (`Group.shrink()`, the trainers' `onWorkerFailure(SHRINK)`)")
            .build(null, "unset: groups cannot shrink in place", value -> Path.of(value.strip()));

    /** {@code symmem4j.pretend.ranks.per.node}: pretend every k consecutive ranks are one machine (null: unset). */
    public static final Setting<Integer> PRETEND_RANKS_PER_NODE = Setting.property("symmem4j.pretend.ranks.per.node")
            .alias("symmem4j.pretendRanksPerNode")
            .type("integer")
            .accepts("a positive whole number of ranks per pretended machine")
            .experimental()
            .describedAs("tests and benchmarks of the multi-node collectives on one machine: every `k` consecutive"
                    + " ranks of the job (`RANK`, else Open MPI's rank; a sub-group's ranks keep their machines)"
                    + " count as one machine")
            .build(null, "unset", value -> positive(Integer.parseInt(value.strip())));

    // ---------------------------------------------------------------- names set that no setting has

    /**
     * {@code symmem4j.settings.unknown}: what a {@code symmem4j.*} property or {@code SYMMEM4J_*} variable that
     * symmem4j does not know ({@link KnownSettings}) does at validation: a warning once per JVM, or an error.
     */
    public static final Setting<String> UNKNOWN_SETTINGS = Setting.property("symmem4j.settings.unknown")
            .type("choice")
            .accepts("`warn`, `error`")
            .describedAs("what a `symmem4j.*` system property or `SYMMEM4J_*` environment variable that symmem4j does"
                    + " not know (a misspelt name, or one of another version) does when a group is created: `warn` logs one"
                    + " warning per JVM naming each such name and the closest known one; `error` refuses to create the"
                    + " group, as a bad value does")
            .build("warn", "`warn`", choice("warn", "error"));

    // ---------------------------------------------------------------- CPU affinity

    /** {@code symmem4j.affinity}: whether and how rank threads and worker processes are pinned, one CPU each. */
    public static final Setting<String> AFFINITY = Setting.property("symmem4j.affinity")
            .type("choice")
            .accepts("`off`, `cores`, `physical-cores`")
            .describedAs("pins rank r to one CPU of its own (`RankAffinity`, Linux `sched_setaffinity` through FFM): the"
                    + " rank threads of the in-JVM world and the trainers' thread mode (a rank's thread, before it joins),"
                    + " and each process of a process group (every thread of it, when the group is joined; rank r is its"
                    + " `LOCAL_RANK`). `cores` takes the allowed CPUs by number; `physical-cores` takes one hardware"
                    + " thread of each physical core first (sysfs `thread_siblings_list`, `core_id`,"
                    + " `physical_package_id`; cores by package), their siblings only when ranks outnumber the cores."
                    + " More ranks than CPUs, or CPUs the process may not use, fail before anything starts. On a system"
                    + " without `sched_setaffinity` it logs that and pins nothing")
            .build("off", "`off` (`cores` when `symmem4j.affinity.cpus` is set)", choice("off", "cores", "physical-cores"));

    /** {@code symmem4j.affinity.cpus}: the CPUs ranks are pinned to, rank r to the r-th named (null: the mode's order). */
    public static final Setting<List<Integer>> AFFINITY_CPUS = Setting.property("symmem4j.affinity.cpus")
            .type("CPU list")
            .accepts("a CPU list such as `0-7,16`: CPU numbers and low-high ranges, comma-separated, each CPU once")
            .describedAs("overrides the CPUs `symmem4j.affinity` picks: rank r is pinned to the r-th CPU named, in the"
                    + " order written; every CPU must be one this process may use (`sched_getaffinity`: `taskset`, the"
                    + " cgroup's cpuset) and the list must name a CPU per rank, else the job fails before anything starts;"
                    + " set alone it implies `symmem4j.affinity=cores`, with `off` it is an error")
            .build(null, "unset: the CPUs the mode picks", value -> List.copyOf(CpuList.parse(value)));

    // ---------------------------------------------------------------- diagnostics

    /** {@code symmem4j.flight.recorder.entries}: collectives each communicator's flight recorder keeps (0: off). */
    public static final Setting<Integer> FLIGHT_RECORDER_ENTRIES = Setting.property("symmem4j.flight.recorder.entries")
            .type("integer")
            .accepts("a whole number from 0 (off) to 1048576, rounded up to a power of two")
            .describedAs("how many of its last collectives each communicator's flight recorder keeps per rank (operation,"
                    + " sequence number, count, bytes, dtype, algorithm, state, times); dumped as JSON when a collective"
                    + " fails, merged by `symmem4j-flight-report`. Costs no allocation and no clock call per collective")
            .build(1024, "`1024`", value -> {
                int n = Integer.parseInt(value.strip());
                if (n < 0 || n > 1 << 20) {
                    // error-message: a parser's reason, wrapped by Setting.parse, whose message names the fix
                    throw new NumberFormatException("out of range");
                }
                return n;
            });

    /** {@code symmem4j.flight.recorder.dir}: where flight-recorder dumps are written. */
    public static final Setting<Path> FLIGHT_RECORDER_DIR = Setting.property("symmem4j.flight.recorder.dir")
            .type("path")
            .accepts("a writable directory (created if missing)")
            .describedAs("where each rank writes its flight-recorder dump (`flight-<run>-g<generation>-rank<r>-...json`)"
                    + " when a collective fails: a timeout, a dead or aborting peer, a mismatch, a local failure")
            .build(Path.of(System.getProperty("java.io.tmpdir"), "symmem4j-flight-recorder"),
                    "`${java.io.tmpdir}/symmem4j-flight-recorder`", Path::of);

    /**
     * {@code symmem4j.flight.recorder.arrival}: where the flight recorder writes a collective's entry, in the entry
     * barrier's shadow (the default: measured cheaper on 16 cores) or after its wait.
     */
    public static final Setting<String> FLIGHT_RECORDER_ARRIVAL = Setting.property("symmem4j.flight.recorder.arrival")
            .type("choice")
            .accepts("`after-wait`, `in-shadow`")
            .experimental()
            .describedAs("where the flight recorder writes a collective's entry: `in-shadow` between this rank's"
                    + " publish and its wait (measured cheaper: bench/results/2026-11-29-recorder-placement-16core.md),"
                    + " `after-wait` once the entry barrier passed (a rank that fails while waiting writes it on the"
                    + " failure path; to compare their cost in `FlightRecorderCostBench --arrivals`); read once per"
                    + " JVM")
            .build("in-shadow", "`in-shadow`", choice("after-wait", "in-shadow"));

    /**
     * {@code symmem4j.flight.recorder.probe}: which of the flight recorder's per-collective calls the control plane makes
     * (issue #36, a diagnostic: where the one-shot cost comes from).
     */
    public static final Setting<String> FLIGHT_RECORDER_PROBE = Setting.property("symmem4j.flight.recorder.probe")
            .type("choice")
            .accepts("`all`, `arrival`, `none`")
            .experimental()
            .describedAs("a diagnostic of the recorder's cost: `all` makes its two stores per collective (the"
                    + " entry's name word at arrival, the completion count at return), `arrival` only the entry's write, `none` none of them while the recorder"
                    + " is on, an A/A control whose on − off must be 0 (to compare in `FlightRecorderCostBench --arrivals in-shadow,in-shadow+arrival,"
                    + "in-shadow+none`); anything but `all` leaves the dumps without completed states or entries; read once per JVM")
            .build("all", "`all`", choice("all", "arrival", "none"));

    /**
     * {@code symmem4j.wait.spinfirst}: polls a bounded wait makes without a pause instruction before its idle strategy
     * starts (issue #36: whether the pause's granularity is what the flight recorder's shadow work costs).
     */
    public static final Setting<Integer> WAIT_SPIN_FIRST = Setting.property("symmem4j.wait.spinfirst")
            .type("integer")
            .accepts("a whole number from 0 to 4096")
            .experimental()
            .describedAs("how many times a signal-pad wait (entry barrier, barrier, ring step, signal) polls without"
                    + " `Thread.onSpinWait()` before its idle strategy's first pause: a pause takes tens of ns on"
                    + " recent Xeons, so a wait notices a peer's store only at the pause's granularity, and work done"
                    + " just before the wait shifts when it polls (to compare in `FlightRecorderCostBench --arrivals"
                    + " in-shadow,in-shadow+spin256`); read once per JVM")
            .build(0, "`0`", value -> {
                int n = Integer.parseInt(value.strip());
                if (n < 0 || n > 4096) {
                    // error-message: a parser's reason, wrapped by Setting.parse, whose message names the fix
                    throw new NumberFormatException("out of range");
                }
                return n;
            });

    /** {@code symmem4j.nvtx.library}: the NVTX library whose ranges Nsight Systems shows, or {@code off} (null: the search). */
    public static final Setting<String> NVTX_LIBRARY = Setting.property("symmem4j.nvtx.library")
            .type("library")
            .accepts("a library file name or path, or `off`")
            .describedAs("the NVTX library `org.symmem4j.parallel.trace.Nvtx` loads to mark GPU collectives, fused GEMMs,"
                    + " the tensor-parallel MLP's steps and pipeline actions as ranges of the `symmem4j` domain in an"
                    + " `nsys` profile; `off` loads none. Without a library every range costs one untaken branch;"
                    + " `Nvtx.describe()` says what loaded or why not; read once per JVM")
            .build(null, "unset: `libnvtx3interop.so.1`, `libnvToolsExt.so.1`, then both in `$CUDA_HOME/lib64`,"
                    + " `$CUDA_HOME/lib`, `/usr/local/cuda/lib64` and `/usr/local/cuda/lib`", String::strip);

    // ---------------------------------------------------------------- memory

    /** {@code symmem4j.max.symmetric.bytes}: caps a process's resident symmetric memory (null: no cap). */
    public static final Setting<Long> MAX_SYMMETRIC_BYTES = Setting.property("symmem4j.max.symmetric.bytes")
            .alias("symmem4j.maxSymmetricBytes")
            .type("bytes")
            .accepts("a byte count such as `268435456`, `256m` or `1g` (suffixes `k`, `m`, `g`, `t`: powers of 1024)")
            .describedAs("caps the symmetric memory resident in one process: the DL4J trainers' memory plans (group"
                    + " mode's gradient view; ZeRO stage 3's parameter and gradient blocks and working set) are checked"
                    + " against it at `build()`, before anything is allocated (docs/zero-stage-3.md)")
            .build(null, "unset: no cap", Configuration::byteCount);

    // ---------------------------------------------------------------- host collectives

    /** {@code symmem4j.reducer}: {@code scalar} forces the scalar host reduction loops (read once per JVM). */
    public static final Setting<String> REDUCER = Setting.property("symmem4j.reducer")
            .type("choice")
            .accepts("`auto`, `scalar`")
            .experimental()
            .describedAs("the host reduction loops: `auto` vectorizes when module `jdk.incubator.vector` is"
                    + " present, `scalar` forces the scalar loops (to compare them); read once per JVM")
            .build("auto", "`auto`", choice("auto", "scalar"));

    /** {@code symmem4j.thresholds}: the all-reduce threshold table file (null: the default file, when readable). */
    public static final Setting<Path> THRESHOLDS = Setting.property("symmem4j.thresholds")
            .type("path")
            .accepts("a readable threshold file (written by `CalibrateThresholds`)")
            .describedAs("the all-reduce threshold table laid over the shipped one (gradsync's `ThresholdTable`);"
                    + " a named file that cannot be read is an error")
            .build(null, "`~/.symmem4j/thresholds.properties` when readable, over the shipped table", Path::of);

    // ---------------------------------------------------------------- GPUs

    /** {@code symmem4j.cuda.eager.graphs}: eager GPU all-reduces through cached one-kernel graphs (read once per JVM). */
    public static final Setting<Boolean> CUDA_EAGER_GRAPHS = Setting.property("symmem4j.cuda.eager.graphs")
            .alias("symmem4j.cuda.eagerGraphs")
            .type("boolean")
            .accepts("`true`, `false`")
            .experimental()
            .describedAs("eager GPU all-reduces run through cached one-kernel CUDA graphs; `false` launches each"
                    + " plainly (to compare); read once per JVM")
            .build(true, "`true`", Configuration::bool);

    /** {@code symmem4j.cuda.pdl}: programmatic dependent launch on sm_90 and newer. */
    public static final Setting<Boolean> CUDA_PDL = Setting.property("symmem4j.cuda.pdl")
            .type("boolean")
            .accepts("`true`, `false`")
            .experimental()
            .describedAs("programmatic dependent launch on sm_90 and newer; `false` launches kernels without it"
                    + " (to rule it out when a GPU run hangs)")
            .build(true, "`true`", Configuration::bool);

    /** {@code symmem4j.cublas.library}: the cuBLAS library the tensor-parallel GEMMs load (null: the search). */
    public static final Setting<String> CUBLAS_LIBRARY = Setting.property("symmem4j.cublas.library")
            .type("library")
            .accepts("a library file name or path")
            .describedAs("the cuBLAS file `TensorParallelGemm` loads (`CudaTransport.cublasUnavailableReason()`"
                    + " says why it did not); read once per JVM")
            .build(null, "unset: `libcublas.so.13`, `.12`, `libcublas.so`, then `$CUDA_HOME/lib64`,"
                    + " `/usr/local/cuda/lib64`", String::strip);

    /** {@code symmem4j.nvshmem.library}: the NVSHMEM host library, or its directory (null: the search). */
    public static final Setting<String> NVSHMEM_LIBRARY = Setting.property("symmem4j.nvshmem.library")
            .type("library")
            .accepts("`libnvshmem_host.so.3`'s path, or its directory")
            .describedAs("the `libnvshmem_host.so.3` (or its directory) `NvshmemTransport` loads; the property and"
                    + " the environment variable are both tried, the property first;"
                    + " `NvshmemTransport.unavailableReason()` lists every place tried; read once per JVM")
            .build(null, "unset: `NVSHMEM_HOME/lib`, the default library path, then Debian's `libnvshmem3`,"
                    + " `/usr/local/nvshmem`, `/opt/nvidia/nvshmem` and the `nvidia-nvshmem` Python wheels", String::strip);

    /** {@code symmem4j.nvshmem.wait}: how stream-side waits on NVSHMEM heap memory are made. */
    public static final Setting<String> NVSHMEM_WAIT = Setting.property("symmem4j.nvshmem.wait")
            .type("choice")
            .accepts("`nvshmem`, `kernel`")
            .experimental()
            .describedAs("stream-side waits on NVSHMEM heap memory: NVSHMEM's"
                    + " `nvshmemx_signal_wait_until_on_stream`, or `kernel` for our consuming wait kernel on the"
                    + " signal word (1–2.5 µs less a hand-off)")
            .build("nvshmem", "`nvshmem`", choice("nvshmem", "kernel"));

    /** {@code symmem4j.tp.chunk.rows}: rows per chunk of a peer's block in the fused GEMMs (null: by group size). */
    public static final Setting<Integer> TP_CHUNK_ROWS = Setting.property("symmem4j.tp.chunk.rows")
            .alias("symmem4j.tp.chunkRows")
            .type("integer")
            .accepts("a whole number ≥ 0 (0: whole blocks)")
            .experimental()
            .describedAs("rows per chunk of a peer's block in the fused tensor-parallel GEMMs (at most 8 chunks"
                    + " a block); 0 moves and multiplies each peer's block whole; read once per JVM")
            .build(null, "whole blocks on 2 ranks, `1024` on more", value -> {
                int rows = Integer.parseInt(value.strip());
                if (rows < 0) {
                    // error-message: a parser's reason, wrapped by Setting.parse, whose message names the fix
                    throw new NumberFormatException("negative");
                }
                return rows;
            });

    /** {@code symmem4j.tp.fused.graphs.in.one.jvm}: capture fused calls in graphs with ranks as threads (read once). */
    public static final Setting<Boolean> TP_FUSED_GRAPHS_IN_ONE_JVM = Setting.property("symmem4j.tp.fused.graphs.in.one.jvm")
            .alias("symmem4j.tp.fusedGraphsInOneJvm")
            .type("boolean")
            .accepts("`true`, `false`")
            .experimental()
            .describedAs("with the ranks as threads of one JVM, capturing fused tensor-parallel calls in a CUDA"
                    + " graph is refused (such graphs deadlocked the GPUs); `true` captures them anyway (experiments;"
                    + " one process per GPU needs nothing); read once per JVM")
            .build(false, "`false`", Configuration::bool);

    /** {@code symmem4j.tp.enqueue.order}: ranks of one process enqueue fused calls in step (read once per JVM). */
    public static final Setting<Boolean> TP_ENQUEUE_ORDER = Setting.property("symmem4j.tp.enqueue.order")
            .alias("symmem4j.tp.enqueueOrder")
            .type("boolean")
            .accepts("`true`, `false`")
            .experimental()
            .describedAs("ranks of one process enqueue fused tensor-parallel call n + 1 only after every peer has"
                    + " enqueued call n (`EnqueueOrder`); `false` only to reproduce the GPU deadlock it prevents;"
                    + " read once per JVM")
            .build(true, "`true`", Configuration::bool);

    private Configuration() {
    }

    /**
     * Every setting, in the order of this class (and of {@code docs/configuration.md}).
     *
     * @return the settings
     */
    public static List<Setting<?>> all() {
        return Collections.unmodifiableList(ALL);
    }

    /**
     * Reads every setting from the system properties and the environment, so that a bad value fails when a group
     * is created rather than deep inside a collective. The groups' factories call it.
     *
     * @throws IllegalArgumentException naming every setting whose value is not accepted
     */
    public static void validate() {
        validate(Source.SYSTEM);
    }

    static void validate(Source source) {
        List<String> problems = new ArrayList<>();
        boolean strict = "error".equals(orDefault(UNKNOWN_SETTINGS, source)); // a bad value is reported below
        if (strict || !source.unknownReported.get()) {
            List<String> unknown = KnownSettings.unknown(source);
            if (!unknown.isEmpty() && strict) {
                problems.add(KnownSettings.message(unknown, true));
            } else if (!unknown.isEmpty() && source.unknownReported.compareAndSet(false, true)) {
                // once per source, so once per JVM for SYSTEM: every group created would repeat the same list
                source.warnings.accept(KnownSettings.message(unknown, false));
            }
        }
        for (Map.Entry<String, String> removed : REMOVED.entrySet()) {
            String property = removed.getKey();
            String env = property.toUpperCase(Locale.ROOT).replace('.', '_');
            String value = source.properties.apply(property);
            String name = value != null ? "-D" + property : env;
            value = value != null ? value : source.environment.apply(env);
            if (value != null) {
                problems.add(name + "=" + value + " was removed: " + removed.getValue() + " (fix: drop it)");
            }
        }
        for (Setting<?> s : ALL) {
            try {
                s.get(source);
            } catch (IllegalArgumentException e) {
                problems.add(e.getMessage());
            }
        }
        if (problems.size() == 1) {
            throw new IllegalArgumentException(problems.getFirst());
        }
        if (!problems.isEmpty()) {
            throw new IllegalArgumentException(problems.size() + " invalid settings: " + String.join("; ", problems)
                    + " (fix: correct or unset each of them, as its message says)");
        }
    }

    private static <T> T orDefault(Setting<T> setting, Source source) {
        try {
            return setting.get(source);
        } catch (IllegalArgumentException e) {
            return setting.defaultValue();
        }
    }

    /** {@return the properties of settings that no longer exist (set, each is refused by {@link #validate()})} */
    static Set<String> removedNames() {
        return REMOVED.keySet();
    }

    /**
     * Settings that no longer exist, each with what replaced it: set, they are an error rather than silently ignored
     * (a user's old script would otherwise measure something else than it says).
     */
    private static final Map<String, String> REMOVED = removedSettings();

    private static Map<String, String> removedSettings() {
        String recorder = "on 2026-11-30 the flight recorder kept one layout (own-line), the others measured no better"
                + " (docs/flight-recorder.md)";
        return Map.of("symmem4j.flight.recorder.storage", recorder, "symmem4j.flight.recorder.padded", recorder,
                "symmem4j.flight.recorder.compact", recorder, "symmem4j.flight.recorder.runs", recorder);
    }

    /**
     * The default bound of every wait: {@code symmem4j.timeout.ms} when set, else 60 s. Every builder's timeout
     * defaults to it.
     *
     * @return the timeout
     * @throws IllegalArgumentException when the setting is not a positive whole number of milliseconds
     */
    public static Duration timeout() {
        return TIMEOUT.get();
    }

    private static boolean bool(String value) {
        String v = value.strip().toLowerCase(Locale.ROOT);
        return switch (v) {
            case "true" -> true;
            case "false" -> false;
            // error-message: a parser's reason, wrapped by Setting.parse, whose message names the fix
            default -> throw new IllegalArgumentException("not true or false");
        };
    }

    private static Function<String, String> choice(String... accepted) {
        List<String> choices = List.of(accepted);
        return value -> {
            String v = value.strip().toLowerCase(Locale.ROOT);
            if (!choices.contains(v)) {
                // error-message: a parser's reason, wrapped by Setting.parse, whose message names the fix
                throw new IllegalArgumentException("not one of " + choices);
            }
            return v;
        };
    }

    private static long byteCount(String value) {
        String t = value.strip().toLowerCase(Locale.ROOT);
        int shift = switch (t.isEmpty() ? ' ' : t.charAt(t.length() - 1)) {
            case 'k' -> 10;
            case 'm' -> 20;
            case 'g' -> 30;
            case 't' -> 40;
            default -> 0;
        };
        long n = Long.parseLong(shift == 0 ? t : t.substring(0, t.length() - 1));
        if (n < 0 || n > Long.MAX_VALUE >> shift) {
            // error-message: a parser's reason, wrapped by Setting.parse, whose message names the fix
            throw new NumberFormatException("out of range");
        }
        return n << shift;
    }

    private static int positive(int value) {
        if (value < 1) {
            // error-message: a parser's reason, wrapped by Setting.parse, whose message names the fix
            throw new NumberFormatException("not positive");
        }
        return value;
    }

    /**
     * Where settings are read from: system properties, environment variables, and where deprecation warnings go.
     * {@link #SYSTEM} is the JVM's; tests and callers that carry their own environment make their own.
     */
    public static final class Source {

        /**
         * The JVM's system properties and the process environment; warnings to the log, once per alias per JVM and
         * once per JVM for the unknown names.
         */
        public static final Source SYSTEM = new Source(System::getProperty, System::getenv,
                message -> LoggerFactory.getLogger(Configuration.class).warn(message),
                () -> System.getProperties().stringPropertyNames(), () -> System.getenv().keySet());

        private final Function<String, String> properties;
        private final Function<String, String> environment;
        private final Consumer<String> warnings;
        private final Supplier<Set<String>> propertyNames;
        private final Supplier<Set<String>> environmentNames;
        private final Set<String> warned = ConcurrentHashMap.newKeySet();
        /** Whether the unknown names were reported: {@link #validate()} warns once per source. */
        private final AtomicBoolean unknownReported = new AtomicBoolean();

        /**
         * A source of settings whose names cannot be listed, so no name in it is reported as unknown.
         *
         * @param properties  a property by name, null when unset
         * @param environment an environment variable by name, null when unset
         * @param warnings    receives each deprecation warning, once per alias and source
         */
        public Source(Function<String, String> properties, Function<String, String> environment, Consumer<String> warnings) {
            this(properties, environment, warnings, Set::of, Set::of);
        }

        /**
         * A source of settings whose names can be listed, so that {@link Configuration#validate()} reports the
         * {@code symmem4j.*} and {@code SYMMEM4J_*} names symmem4j does not know ({@link KnownSettings}).
         *
         * @param properties       a property by name, null when unset
         * @param environment      an environment variable by name, null when unset
         * @param warnings         receives each deprecation warning, once per alias and source, and the unknown names,
         *                         once per source
         * @param propertyNames    the names of the properties set
         * @param environmentNames the names of the environment variables set
         */
        public Source(Function<String, String> properties, Function<String, String> environment, Consumer<String> warnings,
                Supplier<Set<String>> propertyNames, Supplier<Set<String>> environmentNames) {
            this.properties = Objects.requireNonNull(properties, "properties");
            this.environment = Objects.requireNonNull(environment, "environment");
            this.warnings = Objects.requireNonNull(warnings, "warnings");
            this.propertyNames = Objects.requireNonNull(propertyNames, "propertyNames");
            this.environmentNames = Objects.requireNonNull(environmentNames, "environmentNames");
        }

        Set<String> propertyNames() {
            return propertyNames.get();
        }

        Set<String> environmentNames() {
            return environmentNames.get();
        }

        /**
         * The environment {@code env} alone (no properties), warnings to the log: for callers handed an environment,
         * such as {@code ProcessGroupConfig.fromEnvironment(Map)}.
         *
         * @param env environment variables
         * @return the source
         */
        public static Source environment(Map<String, String> env) {
            Objects.requireNonNull(env, "env");
            return new Source(name -> null, env::get, SYSTEM.warnings, Set::of, env::keySet);
        }
    }

    /**
     * One setting: a system property (with its environment variable) or an environment variable alone.
     *
     * @param <T> the type of its value
     */
    public static final class Setting<T> {

        private final String property;
        private final String env;
        private final List<String> aliases;
        private final String type;
        private final String accepted;
        private final boolean experimental;
        private final String description;
        private final T defaultValue;
        private final String defaultText;
        private final Function<String, T> parser;

        private Setting(Builder b, T defaultValue, String defaultText, Function<String, T> parser) {
            this.property = b.property;
            this.env = b.env;
            this.aliases = List.copyOf(b.aliases);
            this.type = Objects.requireNonNull(b.type, "type");
            this.accepted = Objects.requireNonNull(b.accepted, "accepted");
            this.experimental = b.experimental;
            this.description = Objects.requireNonNull(b.description, "description");
            this.defaultValue = defaultValue;
            this.defaultText = Objects.requireNonNull(defaultText, "defaultText");
            this.parser = Objects.requireNonNull(parser, "parser");
        }

        static Builder property(String name) {
            if (!name.matches("symmem4j(\\.[a-z0-9]+)+")) {
                throw Invariants.violated("setting declared with property=" + name + ", expected dotted lowercase"
                        + " symmem4j.*");
            }
            return new Builder(name, "SYMMEM4J_" + name.substring("symmem4j.".length())
                    .replace('.', '_').toUpperCase(Locale.ROOT));
        }

        static Builder environment(String name) {
            return new Builder(null, name);
        }

        /** {@return the system property's name, or null for an environment variable alone} */
        public String property() {
            return property;
        }

        /** {@return the environment variable's name} */
        public String env() {
            return env;
        }

        /** {@return the deprecated property names still read (each warns once), empty for most} */
        public List<String> aliases() {
            return aliases;
        }

        /** {@return the value's kind for the reference: boolean, integer, milliseconds, path, choice, ...} */
        public String type() {
            return type;
        }

        /** {@return the values accepted, in words} */
        public String accepted() {
            return accepted;
        }

        /** {@return whether the setting is experimental: for reproducing, comparing or tuning; may change} */
        public boolean experimental() {
            return experimental;
        }

        /** {@return what the setting does (Markdown)} */
        public String description() {
            return description;
        }

        /** {@return the default in words (Markdown), as the reference shows it} */
        public String defaultText() {
            return defaultText;
        }

        /** {@return the value when unset; null where the default depends on the machine (the caller's fallback)} */
        public T defaultValue() {
            return defaultValue;
        }

        /** {@return the property's name, or the environment variable's for one alone} */
        public String name() {
            return property != null ? property : env;
        }

        /**
         * The value from the system properties and the environment.
         *
         * @return the value set, else {@link #defaultValue()} (null for some)
         * @throws IllegalArgumentException when the value set is not accepted (the message names the setting, the
         *                                  value and what is accepted)
         */
        public T get() {
            return get(Source.SYSTEM);
        }

        /**
         * The value from {@code source}: the property, else a deprecated alias (warning once), else the
         * environment variable, else the default. Blank counts as unset.
         *
         * @param source where to read
         * @return the value set, else {@link #defaultValue()}
         * @throws IllegalArgumentException when the value set is not accepted
         */
        public T get(Source source) {
            String where = null;
            String raw = null;
            if (property != null) {
                raw = source.properties.apply(property);
                where = "-D" + property;
                if (isBlank(raw)) {
                    raw = null;
                    for (String alias : aliases) {
                        String old = source.properties.apply(alias);
                        if (!isBlank(old)) {
                            if (source.warned.add(alias)) {
                                source.warnings.accept("deprecated setting: -D" + alias + "=" + old + " (renamed:"
                                        + " use -D" + property + " or " + env + "; the old name still works for now)");
                            }
                            raw = old;
                            where = "-D" + alias;
                            break;
                        }
                    }
                }
            }
            if (isBlank(raw)) {
                raw = source.environment.apply(env);
                where = env;
            }
            if (isBlank(raw)) {
                return defaultValue;
            }
            try {
                return Objects.requireNonNull(parser.apply(raw), "parsed");
            } catch (RuntimeException e) {
                String shown = env.equals("SYMMEM4J_SECRET") ? "<hidden>" : raw;
                throw new IllegalArgumentException("invalid setting: " + where + "=" + shown + " expected=" + accepted
                        + " (fix: correct the value, or unset it for the default: " + defaultText.replace("`", "") + ")",
                        e);
            }
        }

        /**
         * Whether a value is set (by the property, an alias or the environment variable).
         *
         * @return true when set and not blank
         */
        public boolean isSet() {
            return isSet(Source.SYSTEM);
        }

        /**
         * Whether {@code source} sets a value (by the property, an alias or the environment variable).
         *
         * @param source where to read
         * @return true when set and not blank
         */
        public boolean isSet(Source source) {
            if (property != null) {
                if (!isBlank(source.properties.apply(property))) {
                    return true;
                }
                for (String alias : aliases) {
                    if (!isBlank(source.properties.apply(alias))) {
                        return true;
                    }
                }
            }
            return !isBlank(source.environment.apply(env));
        }

        @Override
        public String toString() {
            return property != null ? property + " (" + env + ")" : env;
        }

        private static boolean isBlank(String s) {
            return s == null || s.isBlank();
        }

        /** Builds a setting and registers it in {@link Configuration#all()}. */
        static final class Builder {
            private final String property;
            private final String env;
            private final List<String> aliases = new ArrayList<>();
            private String type;
            private String accepted;
            private boolean experimental;
            private String description;

            private Builder(String property, String env) {
                this.property = property;
                this.env = env;
            }

            Builder alias(String oldName) {
                aliases.add(oldName);
                return this;
            }

            Builder type(String kind) {
                this.type = kind;
                return this;
            }

            Builder accepts(String values) {
                this.accepted = values;
                return this;
            }

            Builder experimental() {
                this.experimental = true;
                return this;
            }

            Builder describedAs(String text) {
                this.description = text;
                return this;
            }

            <T> Setting<T> build(T defaultValue, String defaultText, Function<String, T> parser) {
                Setting<T> s = new Setting<>(this, defaultValue, defaultText, parser);
                ALL.add(s);
                return s;
            }
        }
    }
}
