package org.symmem4j.dl4j.nd4j;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.Objects;
import org.bytedeco.javacpp.Pointer;
import org.nd4j.linalg.api.buffer.DataBuffer;
import org.nd4j.linalg.api.concurrency.AffinityManager;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.nativeblas.NativeOps;
import org.nd4j.nativeblas.NativeOpsHolder;
import org.nd4j.nativeblas.OpaqueDataBuffer;
import org.symmem4j.gradsync.DeviceGradientAveraging;
import org.symmem4j.gradsync.DeviceGradients;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Invariants;

/**
 * An ND4J array in a GPU's memory as {@link DeviceGradients} — DL4J's flat gradient view on ND4J's CUDA backend
 * ({@code nd4j-cuda-11.6} 1.0.0-M2.1) — so that {@link DeviceGradientAveraging} all-reduces it in place, in order
 * with the work ND4J enqueues on its own stream. Compiled against {@code nd4j-api} and {@code nd4j-native-api} only
 * (every backend brings them): nothing here needs ND4J's CUDA classes or natives at build time, so a CPU build does
 * not pull them.
 *
 * <p>What it takes from ND4J, and why each:
 * <ul>
 *   <li>before the sync, {@code AffinityManager.ensureLocation(array, DEVICE)}: ND4J keeps a host and a device copy
 *       and copies the host copy over if the host wrote last, so the device address holds the gradient;</li>
 *   <li>the device address: the data buffer's native buffer, {@code getOpaqueDataBuffer()}, which the CPU and the
 *       CUDA buffer classes both declare but no interface they share does (so it is found on the buffer's class, a
 *       method handle cached per class), then its {@code specialBuffer()}, the device copy;</li>
 *   <li>the stream: the execution stream of ND4J's launch context for the calling thread and its device,
 *       {@code NativeOps.lcExecutionStream(defaultLaunchContext())}, which libnd4j returns as a pointer to its
 *       {@code cudaStream_t}: the handle is the 8 bytes there;</li>
 *   <li>after the sync, {@code AffinityManager.tagLocation(array, DEVICE)}: the device copy was written, so ND4J
 *       refreshes the host copy before anything reads that.</li>
 * </ul>
 * ND4J's CUDA backend runs on the CUDA runtime, that is on each device's primary context, as symmem4j's CUDA transport
 * does: the address and the stream are valid for our kernels and NCCL on the same GPU. Use it on the thread that
 * trains (ND4J's launch context is per thread and device), with that thread's CUDA device the rank's GPU.
 *
 * <p>Refused at {@link #of}, the array first, then the environment: a data type symmem4j does not reduce, an array
 * that is not the whole of its data buffer (a view or an offset: how ND4J offsets the device pointers of views is not
 * relied on; DL4J's flat gradient view is a whole buffer), and ND4J's CPU backend. Refused at {@link #buffer}: a
 * device address of 0 (no device copy).
 *
 * <p>Has not run on a GPU in this project: {@code nd4j-cuda-11.6} carries code for sm_37 to sm_86 and no PTX, so it
 * runs on A100, RTX 30xx and 40xx GPUs, not on the H100/H200 machines this project is tested on. Its refusals are
 * tested on the CPU backend; {@link DeviceGradientAveraging} is tested on H100s with device buffers of our own.
 */
public final class Nd4jDeviceGradients implements DeviceGradients {

    /**
     * {@code getOpaqueDataBuffer()} of a data buffer class, typed {@code (DataBuffer) -> OpaqueDataBuffer}: public on
     * ND4J 1.0.0-M2.1's {@code BaseCpuDataBuffer} and {@code BaseCudaDataBuffer}, which share no interface that
     * declares it.
     */
    private static final ClassValue<MethodHandle> NATIVE_BUFFER = new ClassValue<>() {
        @Override
        protected MethodHandle computeValue(Class<?> type) {
            // the nearest public class that declares it: a buffer class of its own may be package-private
            for (Class<?> c = type; c != null; c = c.getSuperclass()) {
                try {
                    return MethodHandles.publicLookup().findVirtual(c, "getOpaqueDataBuffer",
                            MethodType.methodType(OpaqueDataBuffer.class)).asType(
                            MethodType.methodType(OpaqueDataBuffer.class, DataBuffer.class));
                } catch (NoSuchMethodException | IllegalAccessException e) {
                    // not declared, or not reachable, here: try the superclass
                }
            }
            throw new IllegalArgumentException("data buffer class=" + type.getName() + " has no public"
                    + " getOpaqueDataBuffer() returning org.nd4j.nativeblas.OpaqueDataBuffer; expected a buffer of ND4J"
                    + " 1.0.0-M2.1, whose BaseCpuDataBuffer and BaseCudaDataBuffer declare it (fix: use ND4J 1.0.0-M2.1"
                    + " with its CUDA backend, nd4j-cuda-11.6)");
        }
    };

    private final INDArray array;
    private final DType dtype;
    private final long bytes;

    private Nd4jDeviceGradients(INDArray array, DType dtype) {
        this.array = array;
        this.dtype = dtype;
        this.bytes = dtype.bytes(array.length());
    }

    /**
     * The array as device gradients. Checks the array, then that ND4J runs its CUDA backend; the array stays the
     * caller's (ND4J owns its memory).
     *
     * @param array a FLOAT, DOUBLE or BFLOAT16 array that is the whole of its data buffer, such as DL4J's flat
     *              gradient view ({@code getGradientsViewArray()})
     * @return the device gradients over it
     * @throws IllegalArgumentException when the data type is not one symmem4j reduces, or the array is a view of
     *                                  part of a buffer
     * @throws IllegalStateException    when ND4J runs its CPU backend (the array lives in host memory)
     */
    public static Nd4jDeviceGradients of(INDArray array) {
        Objects.requireNonNull(array, "array");
        DType dtype = dtypeOf(array);
        requireWholeBuffer(array);
        if (onCpuBackend()) {
            // error-message: cpuBackendRefusal builds the text, with what was expected, what was found and the fix
            throw new IllegalStateException(cpuBackendRefusal("Nd4jDeviceGradients.of"));
        }
        NATIVE_BUFFER.get(array.data().getClass()); // a buffer class without it is refused now, not at the first sync
        return new Nd4jDeviceGradients(array, dtype);
    }

    /**
     * The device copy: valid after {@link #beforeSync}, which allocates and fills it when the host wrote last.
     *
     * @return the device copy's address, sized the array's length times its element size
     * @throws IllegalStateException when the device address is 0 (ND4J has no device copy of the array)
     */
    @Override
    public MemorySegment buffer() {
        long address = devicePointer(array.data());
        if (address == 0) {
            throw new IllegalStateException("the array's device pointer is 0: ND4J has no device copy of its "
                    + array.length() + " " + array.dataType() + " elements (backend=" + Nd4j.getBackend().getClass().getName()
                    + "); expected beforeSync() first, which makes the device copy current, on ND4J's CUDA backend"
                    + " (fix: call beforeSync() before buffer(), with nd4j-cuda-11.6 on the class path)");
        }
        return MemorySegment.ofAddress(address).reinterpret(bytes);
    }

    @Override
    public DType dtype() {
        return dtype;
    }

    /** {@return the array's length: what {@link #buffer} holds, without reading the device address} */
    @Override
    public long elements() {
        return array.length();
    }

    /**
     * ND4J's execution stream for the calling thread's device, read at each call (ND4J's launch context belongs to
     * the thread and its device: call it on the thread that trains).
     *
     * @return the {@code CUstream} ND4J enqueues its ops on
     * @throws IllegalStateException when ND4J's launch context has no CUDA stream (the CPU backend)
     */
    @Override
    public MemorySegment stream() {
        return executionStream();
    }

    /** Makes the device copy current (ND4J copies the host copy over if the host wrote last). */
    @Override
    public void beforeSync() {
        Nd4j.getAffinityManager().ensureLocation(array, AffinityManager.Location.DEVICE);
    }

    /** Marks the device copy written, so ND4J refreshes the host copy before the host reads it. */
    @Override
    public void afterSync() {
        Nd4j.getAffinityManager().tagLocation(array, AffinityManager.Location.DEVICE);
    }

    /**
     * Whether ND4J runs a backend whose arrays live in host memory (nd4j-native), where {@link #of} refuses.
     *
     * @return true on ND4J's CPU backend
     */
    public static boolean onCpuBackend() {
        return Nd4j.getEnvironment().isCPU();
    }

    /**
     * Why {@code what} cannot run on ND4J's CPU backend, with the fix; for this class's and the wrapper's refusals.
     *
     * @param what the mode or operation refused, as the message's subject
     * @return the refusal's message: the backend found, the one expected, and the fix
     */
    public static String cpuBackendRefusal(String what) {
        return what + ": ND4J runs backend=" + Nd4j.getBackend().getClass().getName() + " (nd4j-native), whose arrays"
                + " live in host memory; expected DL4J's CUDA backend, nd4j-cuda-11.6 1.0.0-M2.1, on an Ampere or Ada GPU"
                + " (sm_80/sm_86: it carries no code for Hopper, so H100/H200 cannot run it) (fix: on an A100/RTX 30xx/"
                + "RTX 40xx machine put nd4j-cuda-11.6 instead of nd4j-native on the class path; otherwise use host group"
                + " mode: a group on a host transport, e.g. ProcessGroup.fromEnvironment())";
    }

    /**
     * The device address of {@code buffer}'s native buffer: 0 when it has no device copy, as on the CPU backend.
     *
     * @throws IllegalArgumentException when the buffer's class has no {@code getOpaqueDataBuffer()}
     */
    static long devicePointer(DataBuffer buffer) {
        OpaqueDataBuffer nativeBuffer;
        try {
            nativeBuffer = (OpaqueDataBuffer) NATIVE_BUFFER.get(buffer.getClass()).invokeExact(buffer);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) { // getOpaqueDataBuffer declares no checked exception
            throw Invariants.violated("getOpaqueDataBuffer() of " + buffer.getClass().getName() + " failed: " + t, t);
        }
        if (nativeBuffer == null) {
            return 0;
        }
        Pointer special = nativeBuffer.specialBuffer();
        return special == null ? 0 : special.address();
    }

    /**
     * ND4J's execution stream ({@code CUstream}) of the calling thread's launch context.
     *
     * @throws IllegalStateException when the launch context has none (the CPU backend)
     */
    static MemorySegment executionStream() {
        NativeOps ops = NativeOpsHolder.getInstance().getDeviceNativeOps();
        Pointer streamAddress = ops.lcExecutionStream(ops.defaultLaunchContext());
        if (streamAddress == null || streamAddress.address() == 0) {
            throw new IllegalStateException("ND4J's launch context has no CUDA stream (lcExecutionStream gave a null"
                    + " cudaStream_t*; backend=" + Nd4j.getBackend().getClass().getName() + "); expected ND4J's CUDA backend,"
                    + " nd4j-cuda-11.6 (fix: put nd4j-cuda-11.6 1.0.0-M2.1 instead of nd4j-native on the class path)");
        }
        // libnd4j's LaunchContext::getCudaStream() is a cudaStream_t*: the handle is the 8 bytes it points to
        long stream = MemorySegment.ofAddress(streamAddress.address()).reinterpret(Long.BYTES)
                .get(ValueLayout.JAVA_LONG_UNALIGNED, 0);
        return MemorySegment.ofAddress(stream);
    }

    private static DType dtypeOf(INDArray array) {
        return switch (array.dataType()) {
            case FLOAT -> DType.FLOAT32;
            case DOUBLE -> DType.FLOAT64;
            case BFLOAT16 -> DType.BFLOAT16;
            default -> throw new IllegalArgumentException("array dataType=" + array.dataType() + ": expected FLOAT, DOUBLE"
                    + " or BFLOAT16, the types symmem4j's all-reduce takes (our kernels: FLOAT and BFLOAT16; DOUBLE through"
                    + " NCCL) (fix: build the network with .dataType(DataType.FLOAT))");
        };
    }

    /** Refuses an array that is not the whole of its data buffer: the device address taken is the buffer's. */
    private static void requireWholeBuffer(INDArray array) {
        DataBuffer data = array.data();
        if (array.isView() || array.offset() != 0 || data.offset() != 0 || data.length() != array.length()) {
            throw new IllegalArgumentException("array of " + array.length() + " elements at offset=" + array.offset()
                    + " (isView=" + array.isView() + ") in a data buffer of " + data.length() + " elements at offset="
                    + data.offset() + ": expected an array that is the whole of its data buffer, as DL4J's flat gradient"
                    + " view is (the device address is the buffer's; how ND4J offsets the device pointers of views is not"
                    + " relied on) (fix: pass the network's getGradientsViewArray(), or a dup() of the view)");
        }
    }
}
