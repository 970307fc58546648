package org.symmem4j.parallel.cuda.ffi;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_FLOAT;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.symmem4j.parallel.DType;

/**
 * cuBLAS ({@code libcublas.so}) through FFM: handles bound to a stream, {@code cublasGemmEx} for
 * float32 and bfloat16 with float32 accumulation, and {@code cublasSaxpy}. Found by soname
 * ({@code libcublas.so.13}, then {@code .12}, then {@code libcublas.so}), then in
 * {@code $CUDA_HOME/lib64} and {@code /usr/local/cuda/lib64}; {@code -Dsymmem4j.cublas.library=PATH}
 * names the file. A machine without it gets {@link #available()} false and a reason.
 *
 * <p>cuBLAS works on the calling thread's current context: the primary context of the rank's GPU, which
 * {@code CudaRank} makes current. Every handle gets a workspace of its own ({@link #WORKSPACE_BYTES}),
 * so that GEMMs captured into a CUDA graph allocate nothing.
 *
 * <p>Internal: public only so that {@code org.symmem4j.parallel.cuda} can call it; not part of symmem4j's API.
 */
public final class Cublas {

    /** cuBLAS's advice for Hopper: 32 MiB of workspace per handle. */
    public static final long WORKSPACE_BYTES = 32L << 20;

    private static final int OP_N = 0;
    private static final int OP_T = 1;
    private static final int CUDA_R_32F = 0;
    private static final int CUDA_R_16BF = 14;
    private static final int COMPUTE_32F = 68;
    private static final int GEMM_DEFAULT = -1;

    private static final Holder HOLDER = new Holder();

    private static final class Holder {
        final Cublas cublas;
        final String reason;

        Holder() {
            List<String> candidates = new ArrayList<>();
            String named = org.symmem4j.parallel.Configuration.CUBLAS_LIBRARY.get();
            if (named != null && !named.isBlank()) {
                candidates.add(named);
            } else {
                candidates.addAll(List.of("libcublas.so.13", "libcublas.so.12", "libcublas.so"));
                String home = System.getenv("CUDA_HOME");
                for (String dir : home == null ? List.of("/usr/local/cuda/lib64") : List.of(home + "/lib64", "/usr/local/cuda/lib64")) {
                    candidates.add(dir + "/libcublas.so.13");
                    candidates.add(dir + "/libcublas.so.12");
                }
            }
            List<String> why = new ArrayList<>();
            Cublas found = null;
            for (String name : candidates) {
                String[] reason = {null};
                Optional<NativeLibrary> lib = NativeLibrary.tryLoad(name, reason);
                if (lib.isEmpty()) {
                    why.add(reason[0]);
                    continue;
                }
                try {
                    found = new Cublas(lib.get(), name);
                    break;
                } catch (Throwable t) {
                    why.add(name + " loaded but binding failed: " + t);
                }
            }
            cublas = found;
            reason = found != null ? null : "cuBLAS not found (" + String.join("; ", why)
                    + "): put libcublas.so.13 on the library path or pass -Dsymmem4j.cublas.library=/path/to/libcublas.so";
        }
    }

    /**
     * Whether cuBLAS loaded and bound.
     *
     * @return true when {@link #get()} works
     */
    public static boolean available() {
        return HOLDER.cublas != null;
    }

    /**
     * Why cuBLAS is unavailable.
     *
     * @return the reason, or null when it is available
     */
    public static String unavailableReason() {
        return HOLDER.reason;
    }

    /**
     * The bound library.
     *
     * @return the binding
     * @throws CudaUnavailableException saying why when cuBLAS could not be loaded
     */
    public static Cublas get() {
        if (HOLDER.cublas == null) {
            throw new CudaUnavailableException(HOLDER.reason);
        }
        return HOLDER.cublas;
    }

    private final String library;
    private final MethodHandle cublasCreate;
    private final MethodHandle cublasDestroy;
    private final MethodHandle cublasSetStream;
    private final MethodHandle cublasSetWorkspace;
    private final MethodHandle cublasGemmEx;
    private final MethodHandle cublasSaxpy;
    private final MethodHandle cublasGetStatusString;
    /** alpha and beta constants for GEMMs (host pointers, read at enqueue time: capturable). */
    private final MemorySegment one;
    private final MemorySegment zero;

    private Cublas(NativeLibrary lib, String library) {
        this.library = library;
        cublasCreate = lib.function("cublasCreate_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        cublasDestroy = lib.function("cublasDestroy_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        cublasSetStream = lib.function("cublasSetStream_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cublasSetWorkspace = lib.function("cublasSetWorkspace_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_LONG));
        cublasGemmEx = lib.function("cublasGemmEx", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT,
                JAVA_INT, JAVA_INT, JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, JAVA_LONG, JAVA_INT, JAVA_INT,
                ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT));
        cublasSaxpy = lib.function("cublasSaxpy_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS,
                JAVA_LONG, JAVA_INT, JAVA_LONG, JAVA_INT));
        cublasGetStatusString = lib.function("cublasGetStatusString", FunctionDescriptor.of(ADDRESS, JAVA_INT));
        one = Arena.global().allocate(JAVA_FLOAT).fill((byte) 0);
        one.set(JAVA_FLOAT, 0, 1f);
        zero = Arena.global().allocate(JAVA_FLOAT).fill((byte) 0);
    }

    /** {@return the library file or soname that was loaded} */
    public String library() {
        return library;
    }

    private void check(String function, int status) {
        if (status != 0) {
            throw new CudaException("cuBLAS", function, status, "cublasStatus_t " + status,
                    NativeLibrary.statusText(cublasGetStatusString, status, 256) + " (fix: act on cuBLAS's text;"
                    + " bin/symmem4j-doctor checks the driver, the GPUs and the libraries)");
        }
    }

    /**
     * A handle in the current context, bound to {@code stream}, with its own workspace at {@code workspace}
     * ({@link #WORKSPACE_BYTES} of device memory the caller owns).
     *
     * @param stream    the stream the handle's calls are enqueued on
     * @param workspace device address of the handle's workspace
     * @return the handle; destroy it with {@link #destroyHandle}
     */
    public MemorySegment createHandle(MemorySegment stream, long workspace) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment h = a.allocate(ADDRESS);
            check("cublasCreate_v2", (int) cublasCreate.invokeExact(h));
            MemorySegment handle = h.get(ADDRESS, 0);
            try {
                check("cublasSetStream_v2", (int) cublasSetStream.invokeExact(handle, stream));
                check("cublasSetWorkspace_v2", (int) cublasSetWorkspace.invokeExact(handle, workspace, WORKSPACE_BYTES));
            } catch (RuntimeException e) {
                destroyHandle(handle);
                throw e;
            }
            return handle;
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** Rebinds {@code handle} to {@code stream}. */
    void setStream(MemorySegment handle, MemorySegment stream) {
        try {
            check("cublasSetStream_v2", (int) cublasSetStream.invokeExact(handle, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Destroys a handle of {@link #createHandle} (its workspace stays the caller's).
     *
     * @param handle the handle
     */
    public void destroyHandle(MemorySegment handle) {
        try {
            check("cublasDestroy_v2", (int) cublasDestroy.invokeExact(handle));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Row-major {@code C[m×n] = op(A) · op(B) (+ C when accumulate)}, enqueued on the handle's stream:
     * {@code op(A)} is {@code m×k} (A stored {@code m×k}, or {@code k×m} when {@code transA}), {@code op(B)}
     * is {@code k×n} (B stored {@code k×n}, or {@code n×k} when {@code transB}); all three dense, of
     * {@code dtype}, accumulated in float32. cuBLAS is column-major: a row-major matrix is its transpose,
     * so this asks for {@code Cᵀ = op(B)ᵀ · op(A)ᵀ}.
     *
     * @param handle     a handle of {@link #createHandle}
     * @param c          device address of C
     * @param a          device address of A
     * @param b          device address of B
     * @param m          rows of C and of op(A)
     * @param n          columns of C and of op(B)
     * @param k          columns of op(A), rows of op(B)
     * @param transA     whether A is stored transposed ({@code k×m})
     * @param transB     whether B is stored transposed ({@code n×k})
     * @param dtype      the element type of A, B and C
     * @param accumulate whether to add to C rather than overwrite it
     */
    public void gemm(MemorySegment handle, long c, long a, long b, int m, int n, int k, boolean transA, boolean transB,
              boolean accumulate, DType dtype) {
        gemm(handle, c, a, transA ? m : k, b, m, n, k, transA, transB, accumulate, dtype);
    }

    /**
     * {@link #gemm(MemorySegment, long, long, long, int, int, int, boolean, boolean, boolean, DType)} with {@code a}'s
     * stored rows {@code lda} elements apart (a block of a wider row-major matrix).
     *
     * @param handle     a handle of {@link #createHandle}
     * @param c          device address of the row-major {@code m × n} output
     * @param a          device address of a's first element
     * @param lda        elements between a's stored rows, at least its row length
     * @param b          device address of b
     * @param m          rows of the output
     * @param n          columns of the output
     * @param k          the inner dimension
     * @param transA     whether a is stored transposed
     * @param transB     whether b is stored transposed
     * @param accumulate add to c
     * @param dtype      FLOAT32 or BFLOAT16
     */
    public void gemm(MemorySegment handle, long c, long a, int lda, long b, int m, int n, int k, boolean transA,
                     boolean transB, boolean accumulate, DType dtype) {
        int type = switch (dtype) {
            case FLOAT32 -> CUDA_R_32F;
            case BFLOAT16 -> CUDA_R_16BF;
            default -> throw new IllegalArgumentException("GEMM dtype " + dtype + ": expected FLOAT32 or BFLOAT16 (fix:"
                    + " convert the operands to one of them)");
        };
        int ldb = transB ? k : n;
        // a local of the exact type: invokeExact takes a conditional expression's static type as it infers it
        MemorySegment beta = accumulate ? one : zero;
        try {
            check("cublasGemmEx", (int) cublasGemmEx.invokeExact(handle, transB ? OP_T : OP_N, transA ? OP_T : OP_N,
                    n, m, k, one, b, type, ldb, a, type, lda, beta, c, type, n, COMPUTE_32F, GEMM_DEFAULT));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * {@code y += alpha · x} over {@code n} float32 elements, on the handle's stream (alpha read at enqueue).
     *
     * @param handle a handle of {@link #createHandle}
     * @param n      elements
     * @param alpha  the factor
     * @param x      device address of x
     * @param y      device address of y
     */
    public void saxpy(MemorySegment handle, int n, float alpha, long x, long y) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment al = arena.allocate(JAVA_FLOAT);
            al.set(JAVA_FLOAT, 0, alpha);
            check("cublasSaxpy_v2", (int) cublasSaxpy.invokeExact(handle, n, al, x, 1, y, 1));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }
}
