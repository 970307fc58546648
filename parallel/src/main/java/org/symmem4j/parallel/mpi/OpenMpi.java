package org.symmem4j.parallel.mpi;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;

/**
 * The Open MPI functions and global objects the hierarchy uses, bound once per process.
 *
 * <p>libmpi is opened with {@code dlopen(RTLD_NOW | RTLD_GLOBAL)}, not FFM's library lookup
 * ({@code RTLD_LOCAL}): Open MPI's components are plugins it opens itself, and they resolve symbols of
 * libmpi and libopen-pal from the global namespace (Open MPI's own Java bindings open it the same way).
 */
final class OpenMpi {

    /** The soname of Open MPI 4.x and 5.x's library. */
    static final String SONAME = "libmpi.so.40";
    static final int MPI_SUCCESS = 0;
    static final int MPI_THREAD_SERIALIZED = 2;
    /** {@code MPI_IN_PLACE} in Open MPI's {@code mpi.h}: {@code ((void *) 1)}. */
    static final MemorySegment IN_PLACE = MemorySegment.ofAddress(1);
    /** {@code MPI_MAX_ERROR_STRING} in Open MPI's {@code mpi.h}. */
    static final int MAX_ERROR_STRING = 256;
    private static final int RTLD_NOW = 0x2;
    private static final int RTLD_GLOBAL = 0x100;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final OpenMpi INSTANCE;
    private static final String UNAVAILABLE;

    static {
        OpenMpi loaded = null;
        String reason = null;
        try {
            loaded = new OpenMpi();
        } catch (MpiUnavailableException e) {
            reason = e.getMessage();
        }
        INSTANCE = loaded;
        UNAVAILABLE = reason;
    }

    final MethodHandle initialized;
    final MethodHandle initThread;
    final MethodHandle finalized;
    final MethodHandle finalizeMpi;
    final MethodHandle commRank;
    final MethodHandle commSize;
    final MethodHandle commSplit;
    final MethodHandle commFree;
    final MethodHandle commSetErrhandler;
    final MethodHandle commGroup;
    final MethodHandle groupIncl;
    final MethodHandle groupFree;
    final MethodHandle commCreateGroup;
    final MethodHandle allreduce;
    final MethodHandle reduceScatterBlock;
    final MethodHandle allgather;
    final MethodHandle bcast;
    final MethodHandle send;
    final MethodHandle recv;
    final MethodHandle barrier;
    final MethodHandle errorString;
    final MethodHandle libraryVersion;
    final MemorySegment commWorld;
    final MemorySegment typeFloat;
    final MemorySegment typeDouble;
    final MemorySegment typeByte;
    final MemorySegment opSum;
    final MemorySegment opMax;
    final MemorySegment opMin;
    final MemorySegment errorsReturn;
    private final MemorySegment handle;
    private final MethodHandle dlsym;

    private OpenMpi() {
        MethodHandle dlopen = LINKER.downcallHandle(LINKER.defaultLookup().find("dlopen").orElseThrow(),
                FunctionDescriptor.of(ADDRESS, ADDRESS, JAVA_INT));
        dlsym = LINKER.downcallHandle(LINKER.defaultLookup().find("dlsym").orElseThrow(),
                FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS));
        try (Arena arena = Arena.ofConfined()) {
            handle = (MemorySegment) dlopen.invokeExact(arena.allocateFrom(SONAME), RTLD_NOW | RTLD_GLOBAL);
        } catch (Throwable t) {
            throw new MpiUnavailableException(SONAME + " could not be opened: " + t + " (fix: install Open MPI, e.g."
                    + " Debian's openmpi-bin, so " + SONAME + " is on the library path)");
        }
        if (handle.address() == 0) {
            throw new MpiUnavailableException(SONAME + " is not installed (fix: install Open MPI: Debian's"
                    + " openmpi-bin, which brings"
                    + " libopenmpi3, or your cluster's module)");
        }
        initialized = function("MPI_Initialized", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        initThread = function("MPI_Init_thread", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT, ADDRESS));
        finalized = function("MPI_Finalized", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        finalizeMpi = function("MPI_Finalize", FunctionDescriptor.of(JAVA_INT));
        commRank = function("MPI_Comm_rank", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        commSize = function("MPI_Comm_size", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        commSplit = function("MPI_Comm_split", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT, ADDRESS));
        commFree = function("MPI_Comm_free", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        commSetErrhandler = function("MPI_Comm_set_errhandler", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        commGroup = function("MPI_Comm_group", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        groupIncl = function("MPI_Group_incl", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS, ADDRESS));
        groupFree = function("MPI_Group_free", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        commCreateGroup = function("MPI_Comm_create_group", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT, ADDRESS));
        allreduce = function("MPI_Allreduce", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
        reduceScatterBlock = function("MPI_Reduce_scatter_block",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
        allgather = function("MPI_Allgather",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS, ADDRESS, JAVA_INT, ADDRESS, ADDRESS));
        bcast = function("MPI_Bcast", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS, JAVA_INT, ADDRESS));
        send = function("MPI_Send", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT, ADDRESS));
        recv = function("MPI_Recv",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS));
        barrier = function("MPI_Barrier", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        errorString = function("MPI_Error_string", FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS, ADDRESS));
        libraryVersion = function("MPI_Get_library_version", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        commWorld = symbol("ompi_mpi_comm_world");
        typeFloat = symbol("ompi_mpi_float");
        typeDouble = symbol("ompi_mpi_double");
        typeByte = symbol("ompi_mpi_byte");
        opSum = symbol("ompi_mpi_op_sum");
        opMax = symbol("ompi_mpi_op_max");
        opMin = symbol("ompi_mpi_op_min");
        errorsReturn = symbol("ompi_mpi_errors_return");
    }

    /** The binding, or an {@link MpiUnavailableException} saying why there is none. */
    static OpenMpi get() {
        if (INSTANCE == null) {
            throw new MpiUnavailableException(UNAVAILABLE);
        }
        return INSTANCE;
    }

    /** Whether libmpi could be opened here. */
    static boolean loadable() {
        return INSTANCE != null;
    }

    private MemorySegment symbol(String name) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment s = (MemorySegment) dlsym.invokeExact(handle, arena.allocateFrom(name));
            if (s.address() == 0) {
                throw new MpiUnavailableException(SONAME + " has no symbol " + name + ": not Open MPI's ABI"
                        + " (fix: use Open MPI; this binding"
                        + " needs Open MPI 4 or 5; MPICH-family libraries are not supported)");
            }
            return s;
        } catch (MpiUnavailableException e) {
            throw e;
        } catch (Throwable t) {
            throw new MpiUnavailableException("dlsym(" + name + ") failed: " + t + " (fix: install Open MPI 4 or newer,"
                    + " so " + SONAME + " has " + name + ")");
        }
    }

    private MethodHandle function(String name, FunctionDescriptor descriptor) {
        return LINKER.downcallHandle(symbol(name), descriptor);
    }

    /** MPI's description of {@code code}. */
    String describe(int code) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment text = arena.allocate(MAX_ERROR_STRING);
            MemorySegment length = arena.allocate(JAVA_INT);
            int rc = (int) errorString.invokeExact(code, text, length);
            return rc == MPI_SUCCESS ? text.getString(0) : "MPI error " + code;
        } catch (Throwable t) {
            return "MPI error " + code;
        }
    }

    /** Throws an {@link MpiException} naming {@code call} unless {@code rc} is {@code MPI_SUCCESS}. */
    void check(int rc, String call) {
        if (rc != MPI_SUCCESS) {
            throw new MpiException(call + " failed: " + describe(rc) + " (MPI error " + rc + "; fix: act on MPI's"
                    + " text; Open MPI's messages above say more)", rc);
        }
    }

    static RuntimeException unchecked(Throwable t) {
        if (t instanceof RuntimeException r) {
            return r;
        }
        if (t instanceof Error e) {
            throw e;
        }
        return new IllegalStateException(t);
    }
}
