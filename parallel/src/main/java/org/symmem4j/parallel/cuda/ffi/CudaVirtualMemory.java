package org.symmem4j.parallel.cuda.ffi;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;
import java.util.Optional;

/**
 * The CUDA driver's virtual memory management: physical allocations that another process can map,
 * as PyTorch's and NVSHMEM's symmetric memory use on one machine. A rank creates an allocation
 * exportable as a POSIX file descriptor ({@link #create}), maps it at an address range of its own
 * ({@link #map}), and hands the descriptor to its peers (over {@link org.symmem4j.parallel.ipc.FdChannel});
 * each peer imports it ({@link #importFd}) and maps it in its own address space. Device pointers are
 * per process, so each process reaches a peer's memory at its own address.
 *
 * <p>Lifetime is the driver's: the physical memory lives while any process holds a handle to it or
 * a mapping of it, so a rank that unmaps and releases its own memory cannot pull it from under a
 * peer's kernel that still writes there (unlike in one process, where {@code SymmetricAllocation}
 * must wait for the last rank).
 *
 * <p>The structures passed, from {@code cuda.h}:
 * <pre>
 *   CUmemAllocationProp (32 bytes)          CUmemAccessDesc (12 bytes)
 *    0  int   type = PINNED (1)               0  int  location.type = DEVICE (1)
 *    4  int   requestedHandleTypes            4  int  location.id = device ordinal
 *             = POSIX_FILE_DESCRIPTOR (1)     8  int  flags = PROT_READWRITE (3)
 *    8  int   location.type = DEVICE (1)
 *   12  int   location.id = device ordinal
 *   16  ptr   win32HandleMetaData = NULL
 *   24  8 B   allocFlags = 0
 * </pre>
 *
 * <p>Internal: public only so that {@code org.symmem4j.parallel.cuda} can call it; not part of symmem4j's API.
 */
public final class CudaVirtualMemory {

    static final int ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102;
    static final int ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 103;
    private static final int ALLOCATION_TYPE_PINNED = 1;
    private static final int HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1;
    private static final int LOCATION_TYPE_DEVICE = 1;
    private static final int ACCESS_PROT_READWRITE = 3;
    private static final int GRANULARITY_RECOMMENDED = 1;
    private static final long PROP_BYTES = 32;
    private static final long ACCESS_DESC_BYTES = 12;

    private final CudaDriver driver;
    /** Empty when this driver lacks the calls (older than CUDA 10.2), with {@link #missing} saying which. */
    private final Optional<Calls> calls;
    private final String missing;

    /** The bound functions; all present or none. */
    private record Calls(MethodHandle granularity, MethodHandle create, MethodHandle release, MethodHandle reserve,
                         MethodHandle addressFree, MethodHandle map, MethodHandle unmap, MethodHandle setAccess,
                         MethodHandle export, MethodHandle importHandle) {
    }

    CudaVirtualMemory(CudaDriver driver, NativeLibrary lib) {
        this.driver = driver;
        String[] names = {"cuMemGetAllocationGranularity", "cuMemCreate", "cuMemRelease", "cuMemAddressReserve",
            "cuMemAddressFree", "cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemExportToShareableHandle",
            "cuMemImportFromShareableHandle"};
        FunctionDescriptor[] descriptors = {
            FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT),
            FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, ADDRESS, JAVA_LONG),
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG),
            FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG),
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG),
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG),
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG),
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, ADDRESS, JAVA_LONG),
            FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_LONG),
            // the descriptor travels as the pointer's value: (void *)(uintptr_t) fd
            FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT),
        };
        MethodHandle[] bound = new MethodHandle[names.length];
        StringBuilder absent = new StringBuilder();
        for (int i = 0; i < names.length; i++) {
            Optional<MethodHandle> h = lib.optionalFunction(names[i], descriptors[i]);
            if (h.isPresent()) {
                bound[i] = h.get();
            } else {
                absent.append(absent.isEmpty() ? "" : ", ").append(names[i]);
            }
        }
        this.missing = absent.isEmpty() ? null : absent.toString();
        this.calls = missing != null ? Optional.empty() : Optional.of(new Calls(bound[0], bound[1], bound[2], bound[3],
                bound[4], bound[5], bound[6], bound[7], bound[8], bound[9]));
    }

    /**
     * Why device {@code ordinal} cannot share memory across processes, or null when it can.
     *
     * @param ordinal the device ordinal
     * @return the reason, or null
     */
    public String unsupportedReason(int ordinal) {
        if (missing != null) {
            return "the CUDA driver (version " + driver.driverVersion() + ") lacks " + missing
                    + " (virtual memory management needs CUDA 10.2 or newer)";
        }
        int device = driver.device(ordinal);
        if (driver.attribute(device, ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == 0) {
            return "device " + ordinal + " does not support virtual memory management";
        }
        if (driver.attribute(device, ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) == 0) {
            return "device " + ordinal + " cannot export memory as a POSIX file descriptor";
        }
        return null;
    }

    private Calls calls() {
        return calls.orElseThrow(() -> new CudaUnavailableException("CUDA virtual memory management unavailable: "
                + unsupportedReason(0) + " (fix: run ranks that share GPUs across processes with a driver of CUDA"
                + " 10.2 or newer on a GPU that supports it, or run the ranks as threads of one JVM)"));
    }

    private static MemorySegment allocationProp(Arena a, int ordinal) {
        MemorySegment prop = a.allocate(PROP_BYTES, 8); // zeroed: NULL win32 metadata, no allocFlags
        prop.set(JAVA_INT, 0, ALLOCATION_TYPE_PINNED);
        prop.set(JAVA_INT, 4, HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        prop.set(JAVA_INT, 8, LOCATION_TYPE_DEVICE);
        prop.set(JAVA_INT, 12, ordinal);
        return prop;
    }

    /**
     * The size every exportable allocation on {@code ordinal} is a multiple of (the driver's
     * recommended granularity, 2 MiB on current GPUs).
     *
     * @param ordinal the device ordinal
     * @return bytes
     */
    public long granularity(int ordinal) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_LONG);
            driver.check("cuMemGetAllocationGranularity", (int) calls().granularity().invokeExact(out,
                    allocationProp(a, ordinal), GRANULARITY_RECOMMENDED));
            return out.get(JAVA_LONG, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Creates physical memory on device {@code ordinal}, exportable as a file descriptor.
     *
     * @param ordinal the device ordinal
     * @param bytes   a multiple of {@link #granularity}
     * @return the allocation handle (release with {@link #release})
     */
    public long create(int ordinal, long bytes) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_LONG);
            driver.check("cuMemCreate(" + bytes + " bytes on device " + ordinal + ")",
                    (int) calls().create().invokeExact(out, bytes, allocationProp(a, ordinal), 0L));
            return out.get(JAVA_LONG, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Gives back this process's handle to an allocation (the memory stays while any mapping or other
     * process's handle remains).
     *
     * @param handle from {@link #create} or {@link #importFd}
     */
    void release(long handle) {
        try {
            driver.check("cuMemRelease", (int) calls().release().invokeExact(handle));
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Exports {@code handle} as a file descriptor this process owns (close it once sent).
     *
     * @param handle from {@link #create}
     * @return the descriptor
     */
    public int exportFd(long handle) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_INT);
            driver.check("cuMemExportToShareableHandle(POSIX_FILE_DESCRIPTOR)",
                    (int) calls().export().invokeExact(out, handle, HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0L));
            return out.get(JAVA_INT, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * Imports a peer's exported allocation; the descriptor stays the caller's to close.
     *
     * @param fd a descriptor received from the exporting process
     * @return this process's handle to the allocation (release with {@link #release})
     */
    public long importFd(int fd) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(JAVA_LONG);
            driver.check("cuMemImportFromShareableHandle(POSIX_FILE_DESCRIPTOR)", (int) calls().importHandle()
                    .invokeExact(out, (long) fd, HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
            return out.get(JAVA_LONG, 0);
        } catch (Throwable t) {
            throw NativeLibrary.unchecked(t);
        }
    }

    /**
     * One allocation mapped into this process: {@code bytes} at {@code address}, readable and
     * writable from the mapping device, backed by {@code handle}.
     *
     * @param address the mapping's device address in this process
     * @param bytes   its size
     * @param handle  this process's handle to the physical allocation
     */
    public record Mapping(long address, long bytes, long handle) {
    }

    /**
     * Reserves an address range, maps {@code handle} there and lets device {@code accessOrdinal}
     * read and write it; on failure undoes what it did and releases {@code handle}.
     *
     * @param handle        this process's handle (owned by the mapping from now on)
     * @param bytes         the allocation's size
     * @param accessOrdinal the device whose kernels use the mapping
     * @return the mapping (unmap with {@link #unmap})
     */
    public Mapping map(long handle, long bytes, int accessOrdinal) {
        long address = 0;
        boolean mapped = false;
        try (Arena a = Arena.ofConfined()) {
            Calls c = calls();
            MemorySegment out = a.allocate(JAVA_LONG);
            driver.check("cuMemAddressReserve(" + bytes + " bytes)", (int) c.reserve().invokeExact(out, bytes, 0L, 0L, 0L));
            address = out.get(JAVA_LONG, 0);
            driver.check("cuMemMap", (int) c.map().invokeExact(address, bytes, 0L, handle, 0L));
            mapped = true;
            MemorySegment desc = a.allocate(ACCESS_DESC_BYTES, 4);
            desc.set(JAVA_INT, 0, LOCATION_TYPE_DEVICE);
            desc.set(JAVA_INT, 4, accessOrdinal);
            desc.set(JAVA_INT, 8, ACCESS_PROT_READWRITE);
            driver.check("cuMemSetAccess(device " + accessOrdinal + ", read-write)",
                    (int) c.setAccess().invokeExact(address, bytes, desc, 1L));
            return new Mapping(address, bytes, handle);
        } catch (Throwable t) {
            RuntimeException e = NativeLibrary.unchecked(t);
            undo(address, bytes, mapped, handle, e);
            throw e;
        }
    }

    /**
     * Unmaps a mapping, frees its address range and releases its handle (every step tried).
     *
     * @param m the mapping
     * @throws CudaException naming the first step that failed
     */
    public void unmap(Mapping m) {
        RuntimeException failure = undo(m.address(), m.bytes(), true, m.handle(), null);
        if (failure != null) {
            throw failure;
        }
    }

    /**
     * Unmaps every mapping ({@link #unmap}), each tried whatever failed before it.
     *
     * @param mappings the mappings
     * @throws RuntimeException the first failure, the later ones suppressed in it
     */
    public void unmapAll(java.util.List<Mapping> mappings) {
        EverySteps.run(mappings.stream().<Runnable>map(m -> () -> unmap(m)).toList());
    }

    private RuntimeException undo(long address, long bytes, boolean mapped, long handle, RuntimeException first) {
        Calls c = calls();
        if (mapped) {
            try {
                driver.check("cuMemUnmap", (int) c.unmap().invokeExact(address, bytes));
            } catch (Throwable t) {
                first = chain(first, t);
            }
        }
        if (address != 0) {
            try {
                driver.check("cuMemAddressFree", (int) c.addressFree().invokeExact(address, bytes));
            } catch (Throwable t) {
                first = chain(first, t);
            }
        }
        try {
            driver.check("cuMemRelease", (int) c.release().invokeExact(handle));
        } catch (Throwable t) {
            first = chain(first, t);
        }
        return first;
    }

    private static RuntimeException chain(RuntimeException first, Throwable t) {
        RuntimeException e = NativeLibrary.unchecked(t);
        if (first == null) {
            return e;
        }
        if (first != e) {
            first.addSuppressed(e);
        }
        return first;
    }
}
