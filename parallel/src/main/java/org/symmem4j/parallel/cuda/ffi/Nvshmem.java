package org.symmem4j.parallel.cuda.ffi;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.function.Function;
import java.util.stream.Stream;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SignalOp;

/**
 * NVSHMEM 3's host library ({@code libnvshmem_host.so.3}) through FFM, only what the NVSHMEM transport
 * needs: initialisation by unique id (no MPI: rank 0 draws the id, the group hands it out), finalize,
 * this PE and the number of PEs, the symmetric heap ({@code nvshmem_malloc}/{@code free}), peer
 * pointers ({@code nvshmem_ptr}), put with signal, signal and signal wait on a stream, quiet on a
 * stream, and NVSHMEM's on-stream reductions. Exported C symbols only: the header-inline
 * {@code nvshmem_init*} call a C++ entry point of NVSHMEM's static device library, so the host-library
 * form {@code nvshmemx_hostlib_init_attr} is used — the form for programs whose kernels do not call
 * NVSHMEM's device API (ours use peer pointers).
 *
 * <p>Where the library is looked for, first found wins ({@link #candidates}): {@code -Dsymmem4j.nvshmem.library}
 * (the file, or its directory), {@code SYMMEM4J_NVSHMEM_LIBRARY}, {@code NVSHMEM_HOME/lib}, the
 * default library path ({@code LD_LIBRARY_PATH}, ldconfig), then the usual installs: Debian/Ubuntu's
 * {@code libnvshmem3} packages, {@code /usr/local/nvshmem}, {@code /opt/nvidia/nvshmem}, and the
 * {@code nvidia-nvshmem-cu12/cu13} Python wheels (PyTorch's) in virtual environments and site packages.
 * NVSHMEM finds its bootstrap plugins beside the library (its RPATH).
 *
 * <p>NVSHMEM's void calls report nothing (NVSHMEM aborts the process on fatal errors); every call that
 * returns a status is checked and its failure names the call, the status and what to check.
 *
 * <p>Internal: public only so that {@code org.symmem4j.parallel.cuda} can call it; not part of symmem4j's API.
 */
public final class Nvshmem {

    /** Bytes of an {@code nvshmemx_uniqueid_t}. */
    public static final int UNIQUE_ID_BYTES = 128;
    /** {@code NVSHMEMX_INIT_WITH_UNIQUEID}. */
    static final int INIT_WITH_UNIQUEID = 1 << 3;
    /** {@code NVSHMEM_TEAM_WORLD}. */
    static final int TEAM_WORLD = 0;
    /** {@code NVSHMEM_SIGNAL_SET} and {@code NVSHMEM_SIGNAL_ADD}. */
    static final int SIGNAL_SET = 9;
    static final int SIGNAL_ADD = 10;
    /** {@code NVSHMEM_CMP_GE}. */
    static final int CMP_GE = 5;
    /** {@code nvshmemx_init_status()} once initialised with a GPU per PE ({@code NVSHMEM_STATUS_IS_INITIALIZED}). */
    public static final int STATUS_INITIALIZED = 2;
    /** {@code NVSHMEM_STATUS_LIMITED_MPG}: several PEs on one GPU without MPS; NVSHMEM then refuses barriers and collectives. */
    public static final int STATUS_LIMITED_MPG = 3;

    /**
     * {@code nvshmemx_uniqueid_t} (version 1): a version word, then NVSHMEM's own bytes.
     * <pre>
     *   offset 0   int   version = (1 &lt;&lt; 16) + 128
     *   offset 4   char  internal[124]
     * </pre>
     */
    static final StructLayout UNIQUE_ID = MemoryLayout.structLayout(JAVA_INT.withName("version"),
            MemoryLayout.sequenceLayout(124, java.lang.foreign.ValueLayout.JAVA_BYTE).withName("internal"));

    /**
     * {@code nvshmemx_init_attr_t} (version 1, 144 bytes) with its nested {@code nvshmemx_init_args_t}
     * (128 bytes) and {@code nvshmemx_uniqueid_args_t} (24 bytes). We write the three version words (what
     * the header's {@code NVSHMEMX_INIT_ATTR_INITIALIZER} does); {@code nvshmemx_set_attr_uniqueid_args}
     * fills the rest.
     * <pre>
     *   offset   0  int     version            = (1 &lt;&lt; 16) + 144
     *   offset   8  void*   mpi_comm           = NULL
     *   offset  16  init_args:
     *     offset 16   int     version          = (1 &lt;&lt; 16) + 128
     *     offset 24   uid_args:
     *       offset 24   int     version        = (1 &lt;&lt; 16) + 24
     *       offset 32   void*   id             (set by set_attr_uniqueid_args)
     *       offset 40   int     myrank
     *       offset 44   int     nranks
     *     offset 48   char    content[96]
     * </pre>
     */
    static final StructLayout UNIQUE_ID_ARGS = MemoryLayout.structLayout(JAVA_INT.withName("version"),
            MemoryLayout.paddingLayout(4), ADDRESS.withName("id"), JAVA_INT.withName("myrank"), JAVA_INT.withName("nranks"));
    static final StructLayout INIT_ARGS = MemoryLayout.structLayout(JAVA_INT.withName("version"), MemoryLayout.paddingLayout(4),
            UNIQUE_ID_ARGS.withName("uid_args"), MemoryLayout.sequenceLayout(96, java.lang.foreign.ValueLayout.JAVA_BYTE)
                    .withName("content"));
    static final StructLayout INIT_ATTR = MemoryLayout.structLayout(JAVA_INT.withName("version"), MemoryLayout.paddingLayout(4),
            ADDRESS.withName("mpi_comm"), INIT_ARGS.withName("args"));

    static {
        verifyLayouts();
    }

    /** Checks the layouts above against the sizes NVSHMEM's headers assert (static_assert in nvshmem_types.h). */
    static void verifyLayouts() {
        check("nvshmemx_uniqueid_t", UNIQUE_ID.byteSize(), UNIQUE_ID_BYTES);
        check("nvshmemx_uniqueid_args_t", UNIQUE_ID_ARGS.byteSize(), 24);
        check("nvshmemx_init_args_t", INIT_ARGS.byteSize(), 128);
        check("nvshmemx_init_attr_t", INIT_ATTR.byteSize(), 144);
        check("init_attr.args.uid_args.myrank", INIT_ATTR.byteOffset(MemoryLayout.PathElement.groupElement("args"),
                MemoryLayout.PathElement.groupElement("uid_args"), MemoryLayout.PathElement.groupElement("myrank")), 40);
    }

    private static void check(String what, long found, long expected) {
        if (found != expected) {
            throw Invariants.violated("NVSHMEM layout " + what + ": " + found + " bytes, NVSHMEM 3's header says " + expected);
        }
    }

    private static final Holder HOLDER = new Holder();

    private static final class Holder {
        final Nvshmem nvshmem;
        final String reason;

        Holder() {
            List<String> tried = new ArrayList<>();
            Nvshmem found = null;
            for (String candidate : candidates(System::getProperty, System::getenv, Nvshmem::glob)) {
                String[] why = {null};
                Optional<NativeLibrary> lib = NativeLibrary.tryLoad(candidate, why);
                if (lib.isEmpty()) {
                    tried.add(why[0]);
                    continue;
                }
                try {
                    found = new Nvshmem(lib.get(), candidate);
                    break;
                } catch (Throwable t) {
                    tried.add(candidate + " loaded but binding failed: " + t);
                }
            }
            nvshmem = found;
            reason = found != null ? null : "libnvshmem_host.so.3 not found; tried: " + String.join("; ", tried);
        }
    }

    /**
     * Where the library is looked for, in order (see the class comment); paths that do not exist are left
     * out, except the bare soname (resolved by the dynamic linker).
     *
     * @param property a system property by name (null if unset)
     * @param env      an environment variable by name (null if unset)
     * @param glob     the files matching a glob pattern of absolute paths, sorted
     * @return library names or paths to try
     */
    static List<String> candidates(Function<String, String> property, Function<String, String> env,
                                   Function<String, List<String>> glob) {
        Set<String> out = new LinkedHashSet<>();
        org.symmem4j.parallel.Configuration.Setting<String> named = org.symmem4j.parallel.Configuration.NVSHMEM_LIBRARY;
        for (String given : new String[] {property.apply(named.property()), env.apply(named.env())}) {
            if (given != null && !given.isBlank()) {
                Path p = Path.of(given);
                out.add(Files.isDirectory(p) ? p.resolve("libnvshmem_host.so.3").toString() : given);
            }
        }
        String home = env.apply("NVSHMEM_HOME");
        if (home != null && !home.isBlank()) {
            out.add(Path.of(home, "lib", "libnvshmem_host.so.3").toString());
        }
        out.add("libnvshmem_host.so.3");
        List<String> patterns = new ArrayList<>(List.of(
                "/usr/lib/x86_64-linux-gnu/nvshmem/*/libnvshmem_host.so.3",
                "/usr/lib/aarch64-linux-gnu/nvshmem/*/libnvshmem_host.so.3",
                "/usr/local/nvshmem/lib/libnvshmem_host.so.3",
                "/opt/nvidia/nvshmem/lib/libnvshmem_host.so.3"));
        for (String prefix : new String[] {env.apply("VIRTUAL_ENV"), env.apply("CONDA_PREFIX")}) {
            if (prefix != null && !prefix.isBlank()) {
                patterns.add(prefix + "/lib/python3*/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3");
                patterns.add(prefix + "/lib/libnvshmem_host.so.3");
            }
        }
        String userHome = property.apply("user.home");
        if (userHome != null) {
            patterns.add(userHome + "/.local/lib/python3*/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3");
        }
        patterns.add("/opt/*/.venv/lib/python3*/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3");
        patterns.add("/usr/local/lib/python3*/dist-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3");
        patterns.add("/usr/local/lib/python3*/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3");
        patterns.add("/usr/lib/python3/dist-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3");
        for (String pattern : patterns) {
            out.addAll(glob.apply(pattern));
        }
        return List.copyOf(out);
    }

    /** The existing files matching an absolute glob whose wildcards are in directory or file names, sorted. */
    static List<String> glob(String pattern) {
        Path start = Path.of("/");
        String[] parts = pattern.substring(1).split("/");
        List<Path> level = List.of(start);
        for (String part : parts) {
            List<Path> next = new ArrayList<>();
            for (Path dir : level) {
                if (!part.contains("*")) {
                    Path p = dir.resolve(part);
                    if (Files.exists(p)) {
                        next.add(p);
                    }
                    continue;
                }
                java.nio.file.PathMatcher m = dir.getFileSystem().getPathMatcher("glob:" + part);
                try (Stream<Path> s = Files.list(dir)) {
                    s.filter(p -> m.matches(p.getFileName())).sorted().forEach(next::add);
                } catch (java.io.IOException | SecurityException e) {
                    // an unreadable directory holds nothing we can load
                }
            }
            level = next;
        }
        return level.stream().map(Path::toString).toList();
    }

    /**
     * Whether NVSHMEM's host library loaded and bound.
     *
     * @return true when {@link #get()} returns it
     */
    public static boolean available() {
        return HOLDER.nvshmem != null;
    }

    /**
     * Why NVSHMEM is unavailable.
     *
     * @return every place tried and why it failed, or null when available
     */
    public static String unavailableReason() {
        return HOLDER.reason;
    }

    /**
     * NVSHMEM, loaded once per JVM.
     *
     * @return the bindings
     * @throws CudaUnavailableException with the places tried when the library cannot be loaded
     */
    public static Nvshmem get() {
        if (HOLDER.nvshmem == null) {
            throw new CudaUnavailableException("NVSHMEM is not available: " + HOLDER.reason + " (fix: install"
                    + " NVSHMEM 3, e.g."
                    + " the libnvshmem3 package or pip's nvidia-nvshmem-cu13, or pass -Dsymmem4j.nvshmem.library=PATH to"
                    + " libnvshmem_host.so.3)");
        }
        return HOLDER.nvshmem;
    }

    private final String path;
    private final MethodHandle getUniqueId;
    private final MethodHandle setAttrUniqueIdArgs;
    private final MethodHandle hostlibInitAttr;
    private final MethodHandle hostlibFinalize;
    private final MethodHandle initStatus;
    private final MethodHandle myPe;
    private final MethodHandle nPes;
    private final MethodHandle infoGetVersion;
    private final Optional<MethodHandle> vendorVersion;
    private final MethodHandle malloc;
    private final MethodHandle free;
    private final MethodHandle ptr;
    private final MethodHandle putmemSignalOnStream;
    private final MethodHandle signalOpOnStream;
    private final MethodHandle signalWaitUntilOnStream;
    private final MethodHandle quietOnStream;
    private final MethodHandle barrierAllOnStream;
    /** {@code nvshmemx_<type>_<op>_reduce_on_stream(team, dest, src, nreduce, stream)} by element type and operation. */
    private final Map<DType, Map<ReduceOp, MethodHandle>> reductions = new EnumMap<>(DType.class);

    private Nvshmem(NativeLibrary lib, String path) {
        this.path = path;
        getUniqueId = lib.function("nvshmemx_get_uniqueid", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        setAttrUniqueIdArgs = lib.function("nvshmemx_set_attr_uniqueid_args",
                FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS));
        hostlibInitAttr = lib.function("nvshmemx_hostlib_init_attr", FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS));
        hostlibFinalize = lib.function("nvshmemx_hostlib_finalize", FunctionDescriptor.ofVoid());
        initStatus = lib.function("nvshmemx_init_status", FunctionDescriptor.of(JAVA_INT));
        myPe = lib.function("nvshmem_my_pe", FunctionDescriptor.of(JAVA_INT));
        nPes = lib.function("nvshmem_n_pes", FunctionDescriptor.of(JAVA_INT));
        infoGetVersion = lib.function("nvshmem_info_get_version", FunctionDescriptor.ofVoid(ADDRESS, ADDRESS));
        vendorVersion = lib.optionalFunction("nvshmemx_vendor_get_version_info", FunctionDescriptor.ofVoid(ADDRESS, ADDRESS, ADDRESS));
        malloc = lib.function("nvshmem_malloc", FunctionDescriptor.of(ADDRESS, JAVA_LONG));
        free = lib.function("nvshmem_free", FunctionDescriptor.ofVoid(ADDRESS));
        ptr = lib.function("nvshmem_ptr", FunctionDescriptor.of(ADDRESS, ADDRESS, JAVA_INT));
        putmemSignalOnStream = lib.function("nvshmemx_putmem_signal_on_stream",
                FunctionDescriptor.ofVoid(ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS));
        signalOpOnStream = lib.function("nvshmemx_signal_op_on_stream",
                FunctionDescriptor.ofVoid(ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS));
        signalWaitUntilOnStream = lib.function("nvshmemx_signal_wait_until_on_stream",
                FunctionDescriptor.ofVoid(ADDRESS, JAVA_INT, JAVA_LONG, ADDRESS));
        quietOnStream = lib.function("nvshmemx_quiet_on_stream", FunctionDescriptor.ofVoid(ADDRESS));
        barrierAllOnStream = lib.function("nvshmemx_barrier_all_on_stream", FunctionDescriptor.ofVoid(ADDRESS));
        FunctionDescriptor reduce = FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS);
        Map<DType, String> types = Map.of(DType.FLOAT32, "float", DType.FLOAT64, "double", DType.BFLOAT16, "bfloat16");
        Map<ReduceOp, String> ops = Map.of(ReduceOp.SUM, "sum", ReduceOp.MAX, "max", ReduceOp.MIN, "min");
        for (Map.Entry<DType, String> t : types.entrySet()) {
            Map<ReduceOp, MethodHandle> byOp = new EnumMap<>(ReduceOp.class);
            for (Map.Entry<ReduceOp, String> o : ops.entrySet()) {
                byOp.put(o.getKey(), lib.function("nvshmemx_" + t.getValue() + "_" + o.getValue() + "_reduce_on_stream", reduce));
            }
            reductions.put(t.getKey(), byOp);
        }
    }

    /**
     * The library file loaded, for reports.
     *
     * @return its path or soname as found
     */
    public String path() {
        return path;
    }

    /**
     * NVSHMEM's version, for reports.
     *
     * @return e.g. {@code "NVSHMEM 3.4.5 (OpenSHMEM 1.3)"}
     */
    public String version() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment major = a.allocate(JAVA_INT);
            MemorySegment minor = a.allocate(JAVA_INT);
            MemorySegment patch = a.allocate(JAVA_INT);
            infoGetVersion.invokeExact(major, minor);
            String spec = "OpenSHMEM " + major.get(JAVA_INT, 0) + "." + minor.get(JAVA_INT, 0);
            if (vendorVersion.isEmpty()) {
                return "NVSHMEM (" + spec + ")";
            }
            vendorVersion.get().invokeExact(major, minor, patch);
            return "NVSHMEM " + major.get(JAVA_INT, 0) + "." + minor.get(JAVA_INT, 0) + "." + patch.get(JAVA_INT, 0) + " (" + spec + ")";
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * A fresh unique id (rank 0 draws it; every PE initialises with the same bytes).
     *
     * @return {@link #UNIQUE_ID_BYTES} bytes
     */
    public byte[] uniqueId() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment id = a.allocate(UNIQUE_ID);
            id.set(JAVA_INT, 0, (1 << 16) + UNIQUE_ID_BYTES);
            check("nvshmemx_get_uniqueid", (int) getUniqueId.invokeExact(id), "");
            return id.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Initialises NVSHMEM in this process as PE {@code pe} of {@code pes}, with the CUDA context of this
     * PE's GPU current on the calling thread; collective over every PE. Sets NVSHMEM_DISABLE_NVLS=1 in
     * this process's environment first unless it is set (no NVLink multicast unless asked for).
     *
     * @param pe       this process's PE, 0..pes-1
     * @param pes      the number of PEs
     * @param uniqueId rank 0's {@link #uniqueId()}
     * @throws CudaException when NVSHMEM's initialisation fails
     */
    public void initByUniqueId(int pe, int pes, byte[] uniqueId) {
        if (uniqueId.length != UNIQUE_ID_BYTES) {
            throw new IllegalArgumentException("NVSHMEM unique id has " + uniqueId.length + " bytes, expected " + UNIQUE_ID_BYTES
                    + " (fix: pass the bytes rank 0's uniqueId() returned, unchanged)");
        }
        disableMulticastUnlessSet();
        try (Arena a = Arena.ofConfined()) {
            MemorySegment id = a.allocate(UNIQUE_ID);
            MemorySegment.copy(uniqueId, 0, id, java.lang.foreign.ValueLayout.JAVA_BYTE, 0, UNIQUE_ID_BYTES);
            MemorySegment attr = a.allocate(INIT_ATTR);
            attr.set(JAVA_INT, 0, (1 << 16) + (int) INIT_ATTR.byteSize());
            attr.set(JAVA_INT, 16, (1 << 16) + (int) INIT_ARGS.byteSize());
            attr.set(JAVA_INT, 24, (1 << 16) + (int) UNIQUE_ID_ARGS.byteSize());
            check("nvshmemx_set_attr_uniqueid_args", (int) setAttrUniqueIdArgs.invokeExact(pe, pes, id, attr),
                    " (pe=" + pe + " of " + pes + ")");
            check("nvshmemx_hostlib_init_attr", (int) hostlibInitAttr.invokeExact(INIT_WITH_UNIQUEID, attr),
                    " (pe=" + pe + " of " + pes + "; every PE must call it with the same unique id, one PE per GPU;"
                            + " NVSHMEM_DEBUG=INFO prints why)");
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** NVSHMEM uses NVLink multicast (NVLS) on NVSwitch systems by default; symmem4j keeps it off unless the user set the variable. */
    private static void disableMulticastUnlessSet() {
        if (System.getenv("NVSHMEM_DISABLE_NVLS") != null) {
            return;
        }
        try (Arena a = Arena.ofConfined()) {
            Linker linker = Linker.nativeLinker();
            MethodHandle setenv = linker.downcallHandle(linker.defaultLookup().find("setenv").orElseThrow(),
                    FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
            int rc = (int) setenv.invokeExact(a.allocateFrom("NVSHMEM_DISABLE_NVLS"), a.allocateFrom("1"), 0);
            if (rc != 0) {
                throw new CudaException("libc", "setenv(NVSHMEM_DISABLE_NVLS)", rc, "rc " + rc,
                        "could not keep NVLink multicast off; fix: set NVSHMEM_DISABLE_NVLS=1 before starting the JVM");
            }
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** Finalizes NVSHMEM in this process (collective); a later {@link #initByUniqueId} starts it again. */
    public void finalizeHostlib() {
        try {
            hostlibFinalize.invokeExact();
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * {@code nvshmemx_init_status()}: 0 not initialised, {@link #STATUS_INITIALIZED}, {@link #STATUS_LIMITED_MPG}, ...
     *
     * @return the status
     */
    public int initStatus() {
        try {
            return (int) initStatus.invokeExact();
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** {@return this process's PE, {@code nvshmem_my_pe()}} */
    public int myPe() {
        try {
            return (int) myPe.invokeExact();
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** {@return the number of PEs, {@code nvshmem_n_pes()}} */
    public int nPes() {
        try {
            return (int) nPes.invokeExact();
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Collective: {@code bytes} of the symmetric heap on every PE (same size and order everywhere).
     *
     * @param bytes the size
     * @return the device address, the same symmetric object on every PE
     * @throws CudaException when the heap cannot hold it
     */
    public long malloc(long bytes) {
        try {
            MemorySegment p = (MemorySegment) malloc.invokeExact(bytes);
            if (p.address() == 0) {
                throw new CudaException("NVSHMEM", "nvshmem_malloc", -1, "NULL",
                        "the symmetric heap could not hold " + bytes + " more bytes (fix: raise"
                                + " NVSHMEM_SYMMETRIC_SIZE, or free"
                                + " memory; every PE must allocate the same sizes in the same order)");
            }
            return p.address();
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Collective: gives {@code address} back to the symmetric heap (every PE, same order).
     *
     * @param address a device address of {@link #malloc}
     */
    public void free(long address) {
        try {
            free.invokeExact(MemorySegment.ofAddress(address));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * PE {@code pe}'s copy of the symmetric object at {@code address}, as this PE's GPU can load and store
     * it (NVLink or PCIe peer mapping).
     *
     * @param address a symmetric object's address on this PE
     * @param pe      the PE
     * @return the device address, or 0 when that PE is reachable only through NVSHMEM's calls (another node)
     */
    public long peerPointer(long address, int pe) {
        try {
            return ((MemorySegment) ptr.invokeExact(MemorySegment.ofAddress(address), pe)).address();
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Enqueues on {@code stream}: copy {@code bytes} from {@code src} (this PE's device memory) to the
     * symmetric address {@code dest} on {@code pe}, then apply {@code op value} to the symmetric signal
     * word {@code signal} on {@code pe}; NVSHMEM delivers the data before the signal update.
     *
     * @param dest   symmetric destination address
     * @param src    this PE's source address
     * @param bytes  bytes to copy
     * @param signal symmetric address of the signal word
     * @param value  the operand of {@code op}
     * @param op     set or add
     * @param pe     the destination PE
     * @param stream the stream
     */
    public void putSignalOnStream(long dest, long src, long bytes, long signal, long value, SignalOp op, int pe, MemorySegment stream) {
        try {
            putmemSignalOnStream.invokeExact(MemorySegment.ofAddress(dest), MemorySegment.ofAddress(src), bytes,
                    MemorySegment.ofAddress(signal), value, signalOp(op), pe, stream);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Enqueues on {@code stream}: apply {@code op value} to the symmetric signal word {@code signal} on {@code pe}.
     *
     * @param signal symmetric address of the signal word
     * @param value  the operand of {@code op}
     * @param op     set or add
     * @param pe     the PE
     * @param stream the stream
     */
    public void signalOnStream(long signal, long value, SignalOp op, int pe, MemorySegment stream) {
        try {
            signalOpOnStream.invokeExact(MemorySegment.ofAddress(signal), value, signalOp(op), pe, stream);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Enqueues on {@code stream} a wait until this PE's signal word {@code signal} is at least {@code atLeast}.
     *
     * @param signal  symmetric address of the signal word
     * @param atLeast the value to wait for
     * @param stream  the stream
     */
    public void waitAtLeastOnStream(long signal, long atLeast, MemorySegment stream) {
        try {
            signalWaitUntilOnStream.invokeExact(MemorySegment.ofAddress(signal), CMP_GE, atLeast, stream);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Enqueues on {@code stream} the completion of every NVSHMEM operation this PE issued on it.
     *
     * @param stream the stream
     */
    public void quietOnStream(MemorySegment stream) {
        try {
            quietOnStream.invokeExact(stream);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** Enqueues on {@code stream} a barrier of every PE (with the quiet of this PE's operations). */
    void barrierAllOnStream(MemorySegment stream) {
        try {
            barrierAllOnStream.invokeExact(stream);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Whether NVSHMEM reduces {@code dtype} with {@code op} ({@link #reduceOnStream}).
     *
     * @param dtype the element type
     * @param op    the operation
     * @return true for float32, float64 and bfloat16 with SUM, MAX or MIN
     */
    public static boolean reduces(DType dtype, ReduceOp op) {
        return dtype != null && op != null && op != ReduceOp.AVG;
    }

    /**
     * Enqueues on {@code stream} NVSHMEM's all-reduce of {@code count} elements of the team of every PE:
     * {@code src} on every PE reduced into {@code dest} on every PE; both symmetric, {@code dest == src} allowed.
     *
     * @param dtype  the element type
     * @param op     SUM, MAX or MIN ({@link #reduces})
     * @param dest   symmetric destination address
     * @param src    symmetric source address
     * @param count  elements
     * @param stream the stream
     */
    public void reduceOnStream(DType dtype, ReduceOp op, long dest, long src, long count, MemorySegment stream) {
        MethodHandle h = reductions.get(dtype).get(op);
        if (h == null) {
            throw new IllegalArgumentException("NVSHMEM has no " + op + " reduction of " + dtype + " (SUM, MAX, MIN of"
                    + " FLOAT32, FLOAT64, BFLOAT16; fix: pass one of those, or use another algorithm for this dtype)");
        }
        try {
            int rc = (int) h.invokeExact(TEAM_WORLD, MemorySegment.ofAddress(dest), MemorySegment.ofAddress(src), count, stream);
            check("nvshmemx_" + dtype + "_" + op + "_reduce_on_stream", rc, " (count=" + count + ")");
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    private static int signalOp(SignalOp op) {
        return op == SignalOp.ADD ? SIGNAL_ADD : SIGNAL_SET;
    }

    private static void check(String function, int code, String context) {
        if (code != 0) {
            throw new CudaException("NVSHMEM", function, code, "status " + code, "NVSHMEM call failed" + context
                    + " (fix: NVSHMEM_DEBUG=INFO says why; bin/symmem4j-doctor checks the driver, the GPUs and the"
                    + " libraries)");
        }
    }
}
