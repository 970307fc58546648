package org.symmem4j.parallel.cuda.ffi;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_FLOAT;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;
import java.util.Optional;

/**
 * The CUDA driver API ({@code libcuda.so.1}) through FFM: devices, primary contexts, memory,
 * streams, events, peer access, modules, kernel launches, stream capture and graphs. Every call is
 * checked; a failure throws {@link CudaException} with the function, the code and the driver's own
 * name and text for it.
 *
 * <p>{@link #get()} loads and initializes the driver once; on a machine without it,
 * {@link #available()} is false and {@link #unavailableReason()} says why.
 *
 * <p>Internal: public only so that {@code org.symmem4j.parallel.cuda} can call it; not part of symmem4j's API.
 */
public final class CudaDriver {

    /** {@code CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED}: not an error for us. */
    static final int PEER_ACCESS_ALREADY_ENABLED = 704;
    /**
     * {@code CU_STREAM_NON_BLOCKING}: a stream flag for {@link #createStream}; no implicit sync with the NULL stream.
     */
    public static final int STREAM_NON_BLOCKING = 1;
    /** {@code CU_STREAM_CAPTURE_MODE_THREAD_LOCAL}: the capture mode {@link #beginCapture} uses. */
    public static final int CAPTURE_MODE_THREAD_LOCAL = 1;
    static final int ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
    /** {@code CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR}: the 9 of sm_90. */
    public static final int ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
    /** {@code CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR}: the 0 of sm_90. */
    public static final int ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
    /** {@code CU_DEVICE_ATTRIBUTE_PCI_BUS_ID}, {@code _PCI_DEVICE_ID}, {@code _PCI_DOMAIN_ID}: where the GPU sits. */
    public static final int ATTRIBUTE_PCI_BUS_ID = 33;
    /** {@code CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID}. */
    public static final int ATTRIBUTE_PCI_DEVICE_ID = 34;
    /** {@code CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID}. */
    public static final int ATTRIBUTE_PCI_DOMAIN_ID = 50;

    private static final Holder HOLDER = new Holder();

    private static final class Holder {
        final CudaDriver driver;
        final String reason;

        Holder() {
            String[] why = {null};
            CudaDriver d = null;
            Optional<NativeLibrary> lib = NativeLibrary.tryLoad("libcuda.so.1", why);
            if (lib.isPresent()) {
                try {
                    d = new CudaDriver(lib.get());
                    d.check("cuInit", (int) d.cuInit.invokeExact(0));
                } catch (CudaException e) {
                    why[0] = "libcuda.so.1 loaded but cuInit failed (no usable GPU?): " + e.getMessage();
                    d = null;
                } catch (Throwable t) {
                    why[0] = "libcuda.so.1 loaded but binding failed: " + t;
                    d = null;
                }
            }
            driver = d;
            reason = d != null ? null : why[0];
        }
    }

    /**
     * Whether the CUDA driver is loaded and initialized.
     *
     * @return true if {@link #get()} returns a driver
     */
    public static boolean available() {
        return HOLDER.driver != null;
    }

    /**
     * Why the driver is unavailable.
     *
     * @return the reason, or null when the driver is available
     */
    public static String unavailableReason() {
        return HOLDER.reason;
    }

    /**
     * The driver, loaded and initialized once per JVM.
     *
     * @return the driver
     * @throws CudaUnavailableException with the reason when there is none
     */
    public static CudaDriver get() {
        if (HOLDER.driver == null) {
            throw new CudaUnavailableException("CUDA is not available: " + HOLDER.reason
                    + " (GPU transports need an NVIDIA driver; fix: install one, or use a host transport)");
        }
        return HOLDER.driver;
    }

    private final MethodHandle cuInit;
    private final MethodHandle cuDriverGetVersion;
    private final MethodHandle cuGetErrorName;
    private final MethodHandle cuGetErrorString;
    private final MethodHandle cuDeviceGetCount;
    private final MethodHandle cuDeviceGet;
    private final MethodHandle cuDeviceGetName;
    private final MethodHandle cuDeviceGetAttribute;
    private final MethodHandle cuDeviceCanAccessPeer;
    private final MethodHandle cuDevicePrimaryCtxRetain;
    private final MethodHandle cuDevicePrimaryCtxRelease;
    private final MethodHandle cuCtxSetCurrent;
    private final MethodHandle cuCtxGetCurrent;
    private final MethodHandle cuCtxGetDevice;
    private final MethodHandle cuDevicePrimaryCtxGetState;
    private final MethodHandle cuCtxEnablePeerAccess;
    private final MethodHandle cuMemAlloc;
    private final MethodHandle cuMemFree;
    private final MethodHandle cuMemcpyHtoD;
    private final MethodHandle cuMemcpyDtoH;
    private final MethodHandle cuMemcpyDtoDAsync;
    private final MethodHandle cuMemsetD8;
    private final MethodHandle cuStreamCreate;
    private final MethodHandle cuStreamDestroy;
    private final MethodHandle cuStreamSynchronize;
    private final MethodHandle cuCtxSynchronize;
    private final MethodHandle cuEventCreate;
    private final MethodHandle cuEventRecord;
    private final MethodHandle cuStreamWaitEvent;
    private final MethodHandle cuEventSynchronize;
    private final MethodHandle cuEventQuery;
    private final MethodHandle cuEventElapsedTime;
    private final MethodHandle cuEventDestroy;
    private final MethodHandle cuModuleLoadData;
    private final MethodHandle cuModuleGetFunction;
    private final MethodHandle cuModuleUnload;
    private final MethodHandle cuMemGetInfo;
    private final MethodHandle cuFuncGetAttribute;
    /** cuFuncGetParamInfo (CUDA 12.4+); empty on older drivers, whose launches cannot check arguments. */
    private final Optional<MethodHandle> cuFuncGetParamInfo;
    private final MethodHandle cuLaunchKernel;
    private final MethodHandle cuStreamQuery;
    private final MethodHandle cuOccupancyMaxActiveBlocksPerMultiprocessor;
    /** cuFuncLoad and cuFuncIsLoaded (CUDA 12.4+); empty on older drivers, whose cuModuleGetFunction loads the function. */
    private final Optional<MethodHandle> cuFuncLoad;
    private final Optional<MethodHandle> cuFuncIsLoaded;
    /** cuModuleGetLoadingMode (CUDA 11.7+), for reports. */
    private final Optional<MethodHandle> cuModuleGetLoadingMode;
    /** cuLaunchKernelEx (CUDA 12.0+); empty on older drivers, which then launch plainly. */
    private final Optional<MethodHandle> cuLaunchKernelEx;
    private final MethodHandle cuStreamBeginCapture;
    private final MethodHandle cuStreamEndCapture;
    private final MethodHandle cuGraphInstantiate;
    private final MethodHandle cuGraphLaunch;
    private final MethodHandle cuGraphUpload;
    private final MethodHandle cuGraphExecDestroy;
    private final MethodHandle cuGraphDestroy;
    private final MethodHandle cuMemcpyHtoDAsync;
    private final MethodHandle cuMemHostAlloc;
    private final MethodHandle cuMemFreeHost;

    private final NativeLibrary lib;
    /** Bound at first use: most processes never export memory. */
    private volatile CudaVirtualMemory virtualMemory;

    private CudaDriver(NativeLibrary lib) {
        this.lib = lib;
        FunctionDescriptor iA = FunctionDescriptor.of(JAVA_INT, ADDRESS);
        cuInit = lib.function("cuInit", FunctionDescriptor.of(JAVA_INT, JAVA_INT));
        cuDriverGetVersion = lib.function("cuDriverGetVersion", iA);
        cuGetErrorName = lib.function("cuGetErrorName", FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS));
        cuGetErrorString = lib.function("cuGetErrorString", FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS));
        cuDeviceGetCount = lib.function("cuDeviceGetCount", iA);
        cuDeviceGet = lib.function("cuDeviceGet", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuDeviceGetName = lib.function("cuDeviceGetName", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT));
        cuDeviceGetAttribute = lib.function("cuDeviceGetAttribute", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT));
        cuDeviceCanAccessPeer = lib.function("cuDeviceCanAccessPeer", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT));
        cuDevicePrimaryCtxRetain = lib.function("cuDevicePrimaryCtxRetain", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuDevicePrimaryCtxRelease = lib.function("cuDevicePrimaryCtxRelease_v2", FunctionDescriptor.of(JAVA_INT, JAVA_INT));
        cuCtxSetCurrent = lib.function("cuCtxSetCurrent", iA);
        cuCtxGetCurrent = lib.function("cuCtxGetCurrent", iA);
        cuCtxGetDevice = lib.function("cuCtxGetDevice", iA);
        cuDevicePrimaryCtxGetState = lib.function("cuDevicePrimaryCtxGetState",
                FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS, ADDRESS));
        cuCtxEnablePeerAccess = lib.function("cuCtxEnablePeerAccess", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuMemAlloc = lib.function("cuMemAlloc_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
        cuMemFree = lib.function("cuMemFree_v2", FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
        cuMemcpyHtoD = lib.function("cuMemcpyHtoD_v2", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, ADDRESS, JAVA_LONG));
        cuMemcpyDtoH = lib.function("cuMemcpyDtoH_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_LONG));
        cuMemcpyDtoDAsync = lib.function("cuMemcpyDtoDAsync_v2", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG, ADDRESS));
        cuMemsetD8 = lib.function("cuMemsetD8_v2", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_BYTE, JAVA_LONG));
        cuStreamCreate = lib.function("cuStreamCreate", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuStreamDestroy = lib.function("cuStreamDestroy_v2", iA);
        cuStreamSynchronize = lib.function("cuStreamSynchronize", iA);
        cuCtxSynchronize = lib.function("cuCtxSynchronize", FunctionDescriptor.of(JAVA_INT));
        cuEventCreate = lib.function("cuEventCreate", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuEventRecord = lib.function("cuEventRecord", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cuStreamWaitEvent = lib.function("cuStreamWaitEvent", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
        cuEventSynchronize = lib.function("cuEventSynchronize", iA);
        cuEventQuery = lib.function("cuEventQuery", iA);
        FunctionDescriptor elapsed = FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS);
        cuEventElapsedTime = lib.optionalFunction("cuEventElapsedTime_v2", elapsed)
                .orElseGet(() -> lib.function("cuEventElapsedTime", elapsed));
        cuEventDestroy = lib.function("cuEventDestroy_v2", iA);
        cuModuleLoadData = lib.function("cuModuleLoadData", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cuModuleGetFunction = lib.function("cuModuleGetFunction", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
        cuModuleUnload = lib.function("cuModuleUnload", iA);
        cuMemGetInfo = lib.function("cuMemGetInfo_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cuFuncGetAttribute = lib.function("cuFuncGetAttribute", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS));
        cuFuncGetParamInfo = lib.optionalFunction("cuFuncGetParamInfo",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS));
        cuLaunchKernel = lib.function("cuLaunchKernel", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT, JAVA_INT,
                JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
        cuStreamQuery = lib.function("cuStreamQuery", iA);
        cuOccupancyMaxActiveBlocksPerMultiprocessor = lib.function("cuOccupancyMaxActiveBlocksPerMultiprocessor",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT, JAVA_LONG));
        cuFuncLoad = lib.optionalFunction("cuFuncLoad", iA);
        cuFuncIsLoaded = lib.optionalFunction("cuFuncIsLoaded", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cuModuleGetLoadingMode = lib.optionalFunction("cuModuleGetLoadingMode", iA);
        cuLaunchKernelEx = lib.optionalFunction("cuLaunchKernelEx",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS, ADDRESS));
        cuStreamBeginCapture = lib.function("cuStreamBeginCapture_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuStreamEndCapture = lib.function("cuStreamEndCapture", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cuGraphInstantiate = lib.function("cuGraphInstantiateWithFlags", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG));
        cuGraphLaunch = lib.function("cuGraphLaunch", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cuGraphUpload = lib.function("cuGraphUpload", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cuGraphExecDestroy = lib.function("cuGraphExecDestroy", iA);
        cuGraphDestroy = lib.function("cuGraphDestroy", iA);
        cuMemcpyHtoDAsync = lib.function("cuMemcpyHtoDAsync_v2", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, ADDRESS, JAVA_LONG, ADDRESS));
        cuMemHostAlloc = lib.function("cuMemHostAlloc", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT));
        cuMemFreeHost = lib.function("cuMemFreeHost", iA);
    }

    /**
     * The driver's virtual memory management calls (exportable allocations, mappings), bound at first use.
     *
     * @return the bindings
     */
    public CudaVirtualMemory virtualMemory() {
        CudaVirtualMemory v = virtualMemory;
        if (v == null) {
            synchronized (this) {
                v = virtualMemory;
                if (v == null) {
                    v = new CudaVirtualMemory(this, lib);
                    virtualMemory = v;
                }
            }
        }
        return v;
    }

    /** Throws {@link CudaException} unless {@code code} is CUDA_SUCCESS. */
    void check(String function, int code) {
        if (code != 0) {
            throw new CudaException("CUDA", function, code, errorText(cuGetErrorName, code), errorText(cuGetErrorString, code)
                    + " (fix: act on the driver's text; bin/symmem4j-doctor checks the driver, the GPUs and the"
                    + " libraries)");
        }
    }

    private static String errorText(MethodHandle fn, int code) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(ADDRESS);
            int rc = (int) fn.invokeExact(code, out);
            MemorySegment s = out.get(ADDRESS, 0);
            return rc != 0 || s.equals(MemorySegment.NULL) ? "(unknown)" : s.reinterpret(4096).getString(0);
        } catch (Throwable t) {
            return "(no text: " + t + ")";
        }
    }


    // ---- devices and contexts

    /**
     * The installed driver's CUDA version (cuDriverGetVersion), e.g. 12040 for 12.4.
     *
     * @return 1000 * major + 10 * minor
     */
    public int driverVersion() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check("cuDriverGetVersion", (int) cuDriverGetVersion.invokeExact(v));
            return v.get(JAVA_INT, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** {@return the number of CUDA devices visible to this process} */
    public int deviceCount() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment n = a.allocate(JAVA_INT);
            check("cuDeviceGetCount", (int) cuDeviceGetCount.invokeExact(n));
            return n.get(JAVA_INT, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * The CUdevice handle of ordinal {@code ordinal}.
     *
     * @param ordinal device ordinal in [0, {@link #deviceCount()})
     * @return the CUdevice handle
     */
    public int device(int ordinal) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment d = a.allocate(JAVA_INT);
            check("cuDeviceGet", (int) cuDeviceGet.invokeExact(d, ordinal));
            return d.get(JAVA_INT, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * {@return the device's name, e.g. "NVIDIA H100 80GB HBM3"}
     *
     * @param device a CUdevice handle
     */
    public String deviceName(int device) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment name = a.allocate(256);
            check("cuDeviceGetName", (int) cuDeviceGetName.invokeExact(name, 256, device));
            return name.getString(0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * An integer device attribute (cuDeviceGetAttribute).
     *
     * @param device a CUdevice handle
     * @param attribute a {@code CUdevice_attribute} value
     * @return the attribute's value
     */
    public int attribute(int device, int attribute) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check("cuDeviceGetAttribute", (int) cuDeviceGetAttribute.invokeExact(v, attribute, device));
            return v.get(JAVA_INT, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * {@return the number of streaming multiprocessors (SMs)}
     *
     * @param device a CUdevice handle
     */
    public int multiprocessorCount(int device) {
        return attribute(device, ATTRIBUTE_MULTIPROCESSOR_COUNT);
    }

    /**
     * Whether {@code device} can map {@code peerDevice}'s memory (cuDeviceCanAccessPeer).
     *
     * @param device a CUdevice handle
     * @param peerDevice the peer's CUdevice handle
     * @return true if peer access is possible
     */
    public boolean canAccessPeer(int device, int peerDevice) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check("cuDeviceCanAccessPeer", (int) cuDeviceCanAccessPeer.invokeExact(v, device, peerDevice));
            return v.get(JAVA_INT, 0) != 0;
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Retains the device's primary context (release with {@link #releasePrimaryContext}).
     *
     * @param device a CUdevice handle
     * @return the CUcontext
     */
    public MemorySegment retainPrimaryContext(int device) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ctx = a.allocate(ADDRESS);
            check("cuDevicePrimaryCtxRetain", (int) cuDevicePrimaryCtxRetain.invokeExact(ctx, device));
            return ctx.get(ADDRESS, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Releases one retain of the device's primary context.
     *
     * @param device a CUdevice handle
     */
    public void releasePrimaryContext(int device) {
        try {
            check("cuDevicePrimaryCtxRelease_v2", (int) cuDevicePrimaryCtxRelease.invokeExact(device));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Makes {@code context} current on the calling thread.
     *
     * @param context a CUcontext
     */
    public void setCurrent(MemorySegment context) {
        try {
            check("cuCtxSetCurrent", (int) cuCtxSetCurrent.invokeExact(context));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * {@return the context current on the calling thread ({@link MemorySegment#NULL} when none)}
     */
    public MemorySegment currentContext() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ctx = a.allocate(ADDRESS);
            check("cuCtxGetCurrent", (int) cuCtxGetCurrent.invokeExact(ctx));
            return ctx.get(ADDRESS, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * {@return the CUdevice handle of the context current on the calling thread (one must be current)}
     */
    public int currentDevice() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment d = a.allocate(JAVA_INT);
            check("cuCtxGetDevice", (int) cuCtxGetDevice.invokeExact(d));
            return d.get(JAVA_INT, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Whether the device's primary context exists now (some retain holds it; the last release destroys it).
     *
     * @param device a CUdevice handle
     * @return cuDevicePrimaryCtxGetState's {@code active}
     */
    public boolean primaryContextActive(int device) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment flags = a.allocate(JAVA_INT);
            MemorySegment active = a.allocate(JAVA_INT);
            check("cuDevicePrimaryCtxGetState", (int) cuDevicePrimaryCtxGetState.invokeExact(device, flags, active));
            return active.get(JAVA_INT, 0) != 0;
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Lets the current context access {@code peerContext}'s memory; already enabled is fine.
     *
     * @param peerContext the peer's CUcontext
     */
    public void enablePeerAccess(MemorySegment peerContext) {
        try {
            int rc = (int) cuCtxEnablePeerAccess.invokeExact(peerContext, 0);
            if (rc != PEER_ACCESS_ALREADY_ENABLED) {
                check("cuCtxEnablePeerAccess", rc);
            }
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    // ---- memory

    /**
     * Allocates device memory in the current context. A request of 0 bytes allocates 1 byte.
     *
     * @param bytes size in bytes
     * @return the device pointer
     */
    public long malloc(long bytes) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment p = a.allocate(JAVA_LONG);
            check("cuMemAlloc_v2(" + bytes + " bytes)", (int) cuMemAlloc.invokeExact(p, Math.max(bytes, 1L)));
            return p.get(JAVA_LONG, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Frees device memory from {@link #malloc}.
     *
     * @param devicePtr the device pointer
     */
    public void free(long devicePtr) {
        try {
            check("cuMemFree_v2", (int) cuMemFree.invokeExact(devicePtr));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * {@code CU_STREAM_LEGACY}: the legacy default (NULL) stream, the one the synchronous copies
     * ({@code cuMemcpyHtoD_v2}, {@code cuMemcpyDtoH_v2}) are ordered on, named explicitly.
     */
    private static final MemorySegment STREAM_LEGACY = MemorySegment.ofAddress(1);

    /**
     * Synchronous host-to-device copy: returns once the bytes are in device memory, whatever the source.
     *
     * <p>{@code cuMemcpyHtoD} alone does not promise that: from pageable host memory it returns once
     * the source was copied to a staging buffer, and the DMA to the destination may still be in flight
     * (CUDA Driver API, "API synchronization behavior", Memcpy, synchronous case 2; page-locked sources
     * are synchronous with respect to the host, case 3). So the copy is followed by a synchronize of the
     * stream it ran on, the legacy default stream: this waits for the staged DMA alone (the ranks'
     * streams are non-blocking, nothing else is launched there), and costs one driver call when the copy
     * already completed (a page-locked source). Telling page-locked from pageable memory would take a
     * driver query of its own ({@code cuPointerGetAttribute}), so every source gets the synchronize.
     *
     * @param dst destination device pointer
     * @param src source host memory
     * @param bytes bytes to copy
     */
    public void copyHostToDevice(long dst, MemorySegment src, long bytes) {
        try {
            check("cuMemcpyHtoD_v2", (int) cuMemcpyHtoD.invokeExact(dst, src, bytes));
            // the copy from pageable memory may have returned with its DMA in flight: wait for it
            check("cuStreamSynchronize(legacy stream)", (int) cuStreamSynchronize.invokeExact(STREAM_LEGACY));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Synchronous device-to-host copy.
     *
     * @param dst destination host memory
     * @param src source device pointer
     * @param bytes bytes to copy
     */
    public void copyDeviceToHost(MemorySegment dst, long src, long bytes) {
        try {
            check("cuMemcpyDtoH_v2", (int) cuMemcpyDtoH.invokeExact(dst, src, bytes));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Stream-ordered copy between device pointers (peers included, with peer access).
     *
     * @param dst destination device pointer
     * @param src source device pointer
     * @param bytes bytes to copy
     * @param stream the CUstream to order the copy on
     */
    public void copyDeviceToDeviceAsync(long dst, long src, long bytes, MemorySegment stream) {
        try {
            check("cuMemcpyDtoDAsync_v2", (int) cuMemcpyDtoDAsync.invokeExact(dst, src, bytes, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Sets {@code bytes} bytes of device memory to {@code value} (cuMemsetD8).
     *
     * @param dst device pointer
     * @param value the byte value
     * @param bytes bytes to set
     */
    public void memset(long dst, byte value, long bytes) {
        try {
            check("cuMemsetD8_v2", (int) cuMemsetD8.invokeExact(dst, value, bytes));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Free and total memory of the current context's device (cuMemGetInfo), as the driver counts
     * them: every process's allocations and contexts, not only this JVM's.
     *
     * @return {@code {freeBytes, totalBytes}}
     */
    public long[] memoryInfo() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment free = a.allocate(JAVA_LONG);
            MemorySegment total = a.allocate(JAVA_LONG);
            check("cuMemGetInfo_v2", (int) cuMemGetInfo.invokeExact(free, total));
            return new long[] {free.get(JAVA_LONG, 0), total.get(JAVA_LONG, 0)};
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    // ---- streams, events, graphs

    /**
     * Creates a stream in the current context.
     *
     * @param flags stream flags, e.g. {@link #STREAM_NON_BLOCKING}
     * @return the CUstream
     */
    public MemorySegment createStream(int flags) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment s = a.allocate(ADDRESS);
            check("cuStreamCreate", (int) cuStreamCreate.invokeExact(s, flags));
            return s.get(ADDRESS, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Destroys a stream from {@link #createStream}.
     *
     * @param stream the CUstream
     */
    public void destroyStream(MemorySegment stream) {
        try {
            check("cuStreamDestroy_v2", (int) cuStreamDestroy.invokeExact(stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Blocks until all work in the current context has completed. With ranks sharing a GPU
     * this waits for the other ranks' work too: call it only where no peer can be waiting for this rank.
     */
    public void synchronizeContext() {
        try {
            check("cuCtxSynchronize", (int) cuCtxSynchronize.invokeExact());
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Blocks until all work enqueued on {@code stream} has completed.
     *
     * @param stream the CUstream
     */
    public void synchronize(MemorySegment stream) {
        try {
            check("cuStreamSynchronize", (int) cuStreamSynchronize.invokeExact(stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** {@code CUDA_ERROR_NOT_READY}: work is still pending on the stream. */
    static final int NOT_READY = 600;

    /**
     * Whether all work enqueued on {@code stream} has completed (cuStreamQuery); never blocks.
     *
     * @param stream the CUstream
     * @return true if the stream has no pending work
     */
    public boolean streamIdle(MemorySegment stream) {
        try {
            int rc = (int) cuStreamQuery.invokeExact(stream);
            if (rc == NOT_READY) {
                return false;
            }
            check("cuStreamQuery", rc);
            return true;
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Creates an event (default flags, timing enabled) in the current context.
     *
     * @return the CUevent
     */
    public MemorySegment createEvent() {
        return createEvent(0);
    }

    /** {@code CU_EVENT_DISABLE_TIMING}: an event that only orders streams (cheaper to record and wait on). */
    public static final int EVENT_DISABLE_TIMING = 0x2;

    /**
     * Creates an event with {@code flags} (e.g. {@link #EVENT_DISABLE_TIMING}) in the current context.
     *
     * @param flags the {@code CUevent_flags}
     * @return the CUevent
     */
    public MemorySegment createEvent(int flags) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment e = a.allocate(ADDRESS);
            check("cuEventCreate", (int) cuEventCreate.invokeExact(e, flags));
            return e.get(ADDRESS, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Makes {@code stream}'s later work wait until {@code event}'s last record has completed (a fork or
     * join between two streams; captured into a graph as an edge when the stream is being captured).
     *
     * @param stream the CUstream that waits
     * @param event the CUevent recorded on another stream
     */
    public void waitEvent(MemorySegment stream, MemorySegment event) {
        try {
            check("cuStreamWaitEvent", (int) cuStreamWaitEvent.invokeExact(stream, event, 0));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Records {@code event} on {@code stream}.
     *
     * @param event the CUevent
     * @param stream the CUstream
     */
    public void record(MemorySegment event, MemorySegment stream) {
        try {
            check("cuEventRecord", (int) cuEventRecord.invokeExact(event, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Blocks until {@code event} has completed.
     *
     * @param event the CUevent
     */
    public void synchronizeEvent(MemorySegment event) {
        try {
            check("cuEventSynchronize", (int) cuEventSynchronize.invokeExact(event));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Whether the work before {@code event}'s last record has completed (cuEventQuery); never blocks.
     * An event never recorded counts as completed, as the driver has it.
     *
     * @param event the CUevent
     * @return true once the event has completed, false while work before it is pending
     */
    public boolean eventDone(MemorySegment event) {
        try {
            int rc = (int) cuEventQuery.invokeExact(event);
            if (rc == NOT_READY) {
                return false;
            }
            check("cuEventQuery", rc);
            return true;
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Time between two recorded, completed events.
     *
     * @param start the earlier CUevent
     * @param end the later CUevent
     * @return elapsed time in milliseconds
     */
    public float elapsedMillis(MemorySegment start, MemorySegment end) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ms = a.allocate(JAVA_FLOAT);
            check("cuEventElapsedTime", (int) cuEventElapsedTime.invokeExact(ms, start, end));
            return ms.get(JAVA_FLOAT, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Destroys an event from {@link #createEvent}.
     *
     * @param event the CUevent
     */
    public void destroyEvent(MemorySegment event) {
        try {
            check("cuEventDestroy_v2", (int) cuEventDestroy.invokeExact(event));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Starts capturing the work the calling thread enqueues on {@code stream} into a graph.
     *
     * @param stream the CUstream
     */
    public void beginCapture(MemorySegment stream) {
        try {
            check("cuStreamBeginCapture_v2", (int) cuStreamBeginCapture.invokeExact(stream, CAPTURE_MODE_THREAD_LOCAL));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Ends capture and instantiates the graph (the graph itself is destroyed).
     *
     * @param stream the CUstream being captured
     * @return the executable graph (CUgraphExec)
     */
    public MemorySegment endCaptureAndInstantiate(MemorySegment stream) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment graph = a.allocate(ADDRESS);
            check("cuStreamEndCapture", (int) cuStreamEndCapture.invokeExact(stream, graph));
            MemorySegment exec = a.allocate(ADDRESS);
            MemorySegment g = graph.get(ADDRESS, 0);
            check("cuGraphInstantiateWithFlags", (int) cuGraphInstantiate.invokeExact(exec, g, 0L));
            check("cuGraphDestroy", (int) cuGraphDestroy.invokeExact(g));
            return exec.get(ADDRESS, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Launches an executable graph on {@code stream}.
     *
     * @param exec the CUgraphExec
     * @param stream the CUstream
     */
    public void launchGraph(MemorySegment exec, MemorySegment stream) {
        try {
            check("cuGraphLaunch", (int) cuGraphLaunch.invokeExact(exec, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Uploads an instantiated graph to the device on {@code stream} without running it (the first launch would otherwise).
     *
     * @param exec the CUgraphExec
     * @param stream the CUstream
     */
    public void uploadGraph(MemorySegment exec, MemorySegment stream) {
        try {
            check("cuGraphUpload", (int) cuGraphUpload.invokeExact(exec, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Destroys an executable graph.
     *
     * @param exec the CUgraphExec
     */
    public void destroyGraph(MemorySegment exec) {
        try {
            check("cuGraphExecDestroy", (int) cuGraphExecDestroy.invokeExact(exec));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    // ---- modules and launches

    /**
     * Loads a fatbin/cubin/PTX image into the current context.
     *
     * @param image the image bytes (PTX NUL-terminated)
     * @return the CUmodule
     */
    public MemorySegment loadModule(MemorySegment image) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment m = a.allocate(ADDRESS);
            check("cuModuleLoadData", (int) cuModuleLoadData.invokeExact(m, image));
            return m.get(ADDRESS, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Looks up a kernel by name (cuModuleGetFunction).
     *
     * @param module the CUmodule
     * @param name the kernel's (extern "C") name
     * @return the CUfunction
     */
    public MemorySegment function(MemorySegment module, String name) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment f = a.allocate(ADDRESS);
            check("cuModuleGetFunction(" + name + ")", (int) cuModuleGetFunction.invokeExact(f, module, a.allocateFrom(name)));
            return f.get(ADDRESS, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Unloads a module from {@link #loadModule} from the current context; its functions become invalid.
     *
     * @param module the CUmodule
     */
    public void unloadModule(MemorySegment module) {
        try {
            check("cuModuleUnload", (int) cuModuleUnload.invokeExact(module));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** {@code CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK}. */
    public static final int FUNCTION_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
    /** {@code CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES}: static shared memory per block. */
    static final int FUNCTION_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
    /** {@code CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES}. */
    static final int FUNCTION_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

    /**
     * An integer attribute of a kernel (cuFuncGetAttribute).
     *
     * @param function the CUfunction
     * @param attribute a {@code CUfunction_attribute} value, e.g. {@link #FUNCTION_ATTRIBUTE_MAX_THREADS_PER_BLOCK}
     * @return the attribute's value
     */
    public int functionAttribute(MemorySegment function, int attribute) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check("cuFuncGetAttribute", (int) cuFuncGetAttribute.invokeExact(v, attribute, function));
            return v.get(JAVA_INT, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** {@code CUDA_ERROR_INVALID_VALUE}: cuFuncGetParamInfo's answer for an index past the last parameter. */
    static final int INVALID_VALUE = 1;

    /**
     * The byte size of each of a kernel's parameters, in order (cuFuncGetParamInfo, CUDA 12.4+);
     * empty on drivers without it.
     *
     * @param function the CUfunction
     * @return the sizes, or empty when the driver cannot say
     */
    public Optional<long[]> parameterSizes(MemorySegment function) {
        if (cuFuncGetParamInfo.isEmpty()) {
            return Optional.empty();
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment offset = a.allocate(JAVA_LONG);
            MemorySegment size = a.allocate(JAVA_LONG);
            long[] sizes = new long[16];
            int n = 0;
            while (true) {
                int rc = (int) cuFuncGetParamInfo.get().invokeExact(function, (long) n, offset, size);
                if (rc == INVALID_VALUE) {
                    return Optional.of(java.util.Arrays.copyOf(sizes, n));
                }
                check("cuFuncGetParamInfo", rc);
                if (n == sizes.length) {
                    sizes = java.util.Arrays.copyOf(sizes, 2 * n);
                }
                sizes[n++] = size.get(JAVA_LONG, 0);
            }
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** {@code CU_FUNCTION_LOADING_STATE_LOADED}. */
    static final int FUNCTION_LOADED = 1;
    /** {@code CU_MODULE_LAZY_LOADING}. */
    static final int MODULE_LAZY_LOADING = 2;

    /**
     * Finishes loading {@code function} into its context now (cuFuncLoad), so that no later launch
     * loads it. Under lazy loading (CUDA's default since 12.2) cuModuleGetFunction may return a
     * function that is only partly loaded, and its first launch loads the rest, which may synchronize
     * the context. Returns false on drivers without cuFuncLoad (before 12.4), whose
     * cuModuleGetFunction loads the function itself.
     *
     * @param function the CUfunction
     * @return true if loaded now, false if the driver lacks cuFuncLoad
     */
    public boolean loadFunction(MemorySegment function) {
        if (cuFuncLoad.isEmpty()) {
            return false;
        }
        try {
            check("cuFuncLoad", (int) cuFuncLoad.get().invokeExact(function));
            return true;
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Whether {@code function} is fully loaded (cuFuncIsLoaded); empty on drivers without it (before 12.4).
     *
     * @param function the CUfunction
     * @return whether it is fully loaded, or empty if the driver cannot say
     */
    public Optional<Boolean> functionLoaded(MemorySegment function) {
        if (cuFuncIsLoaded.isEmpty()) {
            return Optional.empty();
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment state = a.allocate(JAVA_INT);
            check("cuFuncIsLoaded", (int) cuFuncIsLoaded.get().invokeExact(state, function));
            return Optional.of(state.get(JAVA_INT, 0) == FUNCTION_LOADED);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Whether the driver loads kernels lazily (cuModuleGetLoadingMode; CUDA_MODULE_LOADING); empty on drivers without it.
     *
     * @return whether loading is lazy, or empty if the driver cannot say
     */
    public Optional<Boolean> lazyLoading() {
        if (cuModuleGetLoadingMode.isEmpty()) {
            return Optional.empty();
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment mode = a.allocate(JAVA_INT);
            check("cuModuleGetLoadingMode", (int) cuModuleGetLoadingMode.get().invokeExact(mode));
            return Optional.of(mode.get(JAVA_INT, 0) == MODULE_LAZY_LOADING);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Launches {@code function} on {@code stream}. {@code params} is the {@code void**} array of
     * pointers to each argument's value.
     *
     * @param function the CUfunction
     * @param gridX blocks in the (1-D) grid
     * @param blockX threads per (1-D) block
     * @param stream the CUstream
     * @param params the kernel parameter array ({@code void**})
     */
    public void launch(MemorySegment function, int gridX, int blockX, MemorySegment stream, MemorySegment params) {
        launch(function, gridX, 1, 1, blockX, 1, 1, 0, stream, params);
    }

    /**
     * Launches {@code function} on {@code stream} with a 3-D grid and block and dynamic shared memory (cuLaunchKernel).
     *
     * @param function the CUfunction
     * @param gridX blocks in x
     * @param gridY blocks in y
     * @param gridZ blocks in z
     * @param blockX threads per block in x
     * @param blockY threads per block in y
     * @param blockZ threads per block in z
     * @param sharedBytes dynamic shared memory per block, in bytes
     * @param stream the CUstream
     * @param params the kernel parameter array ({@code void**})
     */
    public void launch(MemorySegment function, int gridX, int gridY, int gridZ, int blockX, int blockY, int blockZ,
                       int sharedBytes, MemorySegment stream, MemorySegment params) {
        try {
            check("cuLaunchKernel", (int) cuLaunchKernel.invokeExact(function, gridX, gridY, gridZ, blockX, blockY, blockZ,
                    sharedBytes, stream, params, MemorySegment.NULL));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * How many blocks of {@code blockThreads} threads of {@code function} one SM holds at once (its
     * registers, shared memory and thread limits), with no dynamic shared memory.
     *
     * @param function the CUfunction
     * @param blockThreads threads per block
     * @return resident blocks per SM
     */
    public int maxActiveBlocksPerMultiprocessor(MemorySegment function, int blockThreads) {
        return maxActiveBlocksPerMultiprocessor(function, blockThreads, 0);
    }

    /**
     * How many blocks of {@code blockThreads} threads of {@code function}, each with
     * {@code dynamicSharedBytes} of dynamic shared memory, one SM holds at once.
     *
     * @param function the CUfunction
     * @param blockThreads threads per block
     * @param dynamicSharedBytes dynamic shared memory per block, in bytes
     * @return resident blocks per SM
     */
    public int maxActiveBlocksPerMultiprocessor(MemorySegment function, int blockThreads, long dynamicSharedBytes) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment n = a.allocate(JAVA_INT);
            check("cuOccupancyMaxActiveBlocksPerMultiprocessor",
                    (int) cuOccupancyMaxActiveBlocksPerMultiprocessor.invokeExact(n, function, blockThreads, dynamicSharedBytes));
            return n.get(JAVA_INT, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Whether {@link #launchProgrammatic} can be used: the driver has {@code cuLaunchKernelEx}.
     *
     * @return true if the driver has {@code cuLaunchKernelEx}
     */
    public boolean supportsProgrammaticLaunch() {
        return cuLaunchKernelEx.isPresent();
    }

    // CUlaunchConfig: gridDim x/y/z, blockDim x/y/z, sharedMemBytes (7 x u32), hStream at 32,
    // attrs at 40, numAttrs at 48; 56 bytes. CUlaunchAttribute: id (u32) at 0, a 64-byte value
    // union at 8; 72 bytes.
    /** Bytes of a {@code CUlaunchConfig}. */
    public static final long LAUNCH_CONFIG_BYTES = 56;
    /** Bytes of a {@code CUlaunchAttribute}. */
    public static final long LAUNCH_ATTRIBUTE_BYTES = 72;
    static final int LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;

    /**
     * Launches {@code function} on {@code stream} with programmatic stream serialization (programmatic
     * dependent launch, sm_90+): the kernel may be scheduled while the previous kernel on the stream
     * still runs, and must itself wait for it ({@code griddepcontrol.wait}) before touching memory,
     * as every symmem4j kernel does. {@code scratch} ({@link #LAUNCH_CONFIG_BYTES} +
     * {@link #LAUNCH_ATTRIBUTE_BYTES} bytes) holds the launch configuration; it is rewritten on every
     * call, so callers that share it must not launch concurrently.
     *
     * @param function the CUfunction
     * @param gridX blocks in the (1-D) grid
     * @param blockX threads per (1-D) block
     * @param stream the CUstream
     * @param params the kernel parameter array ({@code void**})
     * @param scratch at least 128 bytes of host memory for the launch configuration
     * @throws java.util.NoSuchElementException if the driver lacks cuLaunchKernelEx
     */
    public void launchProgrammatic(MemorySegment function, int gridX, int blockX, MemorySegment stream,
                                   MemorySegment params, MemorySegment scratch) {
        MemorySegment attribute = scratch.asSlice(LAUNCH_CONFIG_BYTES, LAUNCH_ATTRIBUTE_BYTES);
        attribute.fill((byte) 0);
        attribute.set(JAVA_INT, 0, LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
        attribute.set(JAVA_INT, 8, 1); // value.programmaticStreamSerializationAllowed
        scratch.set(JAVA_INT, 0, gridX);
        scratch.set(JAVA_INT, 4, 1);
        scratch.set(JAVA_INT, 8, 1);
        scratch.set(JAVA_INT, 12, blockX);
        scratch.set(JAVA_INT, 16, 1);
        scratch.set(JAVA_INT, 20, 1);
        scratch.set(JAVA_INT, 24, 0); // no dynamic shared memory
        scratch.set(ADDRESS, 32, stream);
        scratch.set(ADDRESS, 40, attribute);
        scratch.set(JAVA_INT, 48, 1);
        try {
            check("cuLaunchKernelEx", (int) cuLaunchKernelEx.orElseThrow().invokeExact(scratch, function, params,
                    MemorySegment.NULL));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /** {@code CU_MEMHOSTALLOC_PORTABLE}: the pinned memory counts as pinned in every context. */
    static final int MEMHOSTALLOC_PORTABLE = 1;

    /**
     * Allocates page-locked host memory (cuMemHostAlloc, portable), which stream-ordered copies read
     * without staging; free it with {@link #freeHost}.
     *
     * @param bytes size in bytes
     * @return the memory, {@code bytes} long
     */
    public MemorySegment allocateHost(long bytes) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment p = a.allocate(ADDRESS);
            check("cuMemHostAlloc(" + bytes + " bytes)", (int) cuMemHostAlloc.invokeExact(p, Math.max(bytes, 1L),
                    MEMHOSTALLOC_PORTABLE));
            return p.get(ADDRESS, 0).reinterpret(bytes);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Frees memory from {@link #allocateHost}.
     *
     * @param memory the page-locked memory
     */
    public void freeHost(MemorySegment memory) {
        try {
            check("cuMemFreeHost", (int) cuMemFreeHost.invokeExact(memory));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Stream-ordered host-to-device copy; returns at once when {@code src} is page-locked
     * ({@link #allocateHost}), which must then stay unchanged until the stream has run the copy.
     *
     * @param dst destination device pointer (a peer's too, with peer access)
     * @param src source host memory
     * @param bytes bytes to copy
     * @param stream the CUstream to order the copy on
     */
    public void copyHostToDeviceAsync(long dst, MemorySegment src, long bytes, MemorySegment stream) {
        try {
            check("cuMemcpyHtoDAsync_v2", (int) cuMemcpyHtoDAsync.invokeExact(dst, src, bytes, stream));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }
}
