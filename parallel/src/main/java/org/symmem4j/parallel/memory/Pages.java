package org.symmem4j.parallel.memory;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.SymmemException;

/**
 * Virtual memory of host symmetric memory, page by page, through the C library (Linux on 64-bit
 * CPUs): {@code mmap} of reserved, uncommitted anonymous memory, {@code madvise} to give pages back
 * to the operating system, {@code mincore} to count the pages that hold memory. What makes a
 * buffer sparse: only the pages written hold memory ({@link org.symmem4j.parallel.SymmetricMemory#decommit}). Shared by the host
 * transports (their symmetric memory) and {@link ReservedMemory} (private reserved memory for the layers above),
 * in a package of its own so that neither reaches into the other.
 */
public final class Pages {

    private static final int PROT_READ_WRITE = 0x1 | 0x2;
    private static final int MAP_PRIVATE = 0x02;
    private static final int MAP_ANONYMOUS = 0x20;
    private static final int MAP_NORESERVE = 0x4000;
    /** Private anonymous memory: the pages are dropped and read as zero afterwards. */
    public static final int MADV_DONTNEED = 4;
    /** Shared memory (a tmpfs file): the file's pages are freed (a hole) and read as zero in every mapping. */
    public static final int MADV_REMOVE = 9;
    private static final int SC_PAGESIZE = 30;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final StructLayout CALL_STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CALL_STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final MethodHandle MMAP = function("mmap",
            FunctionDescriptor.of(ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_LONG));
    private static final MethodHandle MUNMAP = function("munmap", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
    private static final MethodHandle MADVISE = function("madvise", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT));
    private static final MethodHandle MINCORE = function("mincore", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, ADDRESS));
    private static final MethodHandle SYSCONF = LINKER.downcallHandle(LINKER.defaultLookup().find("sysconf").orElseThrow(),
            FunctionDescriptor.of(JAVA_LONG, JAVA_INT));
    /** The system's page size in bytes. */
    public static final long PAGE = pageSize();

    private Pages() {
    }

    private static MethodHandle function(String name, FunctionDescriptor d) {
        MemorySegment symbol = LINKER.defaultLookup().find(name).orElseThrow(
                () -> new SymmemException("libc has no " + name + " (sparse symmetric memory needs Linux; fix: run on"
                        + " Linux, or allocate dense memory with SymmetricMemory.allocate)"));
        return LINKER.downcallHandle(symbol, d, Linker.Option.captureCallState("errno"));
    }

    private static long pageSize() {
        try {
            long p = (long) SYSCONF.invokeExact(SC_PAGESIZE);
            return p > 0 ? p : 4096;
        } catch (Throwable t) {
            return 4096;
        }
    }

    /**
     * {@code bytes} of private anonymous memory, reserved but not committed ({@code MAP_NORESERVE}):
     * zero when read, holding memory only once written; unmapped when {@code arena} closes.
     */
    public static MemorySegment reserve(long bytes, Arena arena) {
        long length = Math.max(PAGE, (bytes + PAGE - 1) / PAGE * PAGE);
        MemorySegment address;
        int errno;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment state = a.allocate(CALL_STATE);
            address = (MemorySegment) MMAP.invokeExact(state, MemorySegment.NULL, length, PROT_READ_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0L);
            errno = (int) ERRNO.get(state, 0L);
        } catch (Throwable t) {
            throw Invariants.violated("mmap of " + length + " bytes failed: " + t, t);
        }
        if (address.address() == -1L) {
            throw new SymmemException("mmap of " + length + " bytes of reserved memory failed: errno=" + errno
                    + " (address space or vm.overcommit_memory=2 refuses it; fix: ask for less)");
        }
        long start = address.address();
        return MemorySegment.ofAddress(start).reinterpret(bytes, arena, ignored -> unmap(start, length));
    }

    private static void unmap(long address, long length) {
        try (Arena a = Arena.ofConfined()) {
            int rc = (int) MUNMAP.invokeExact(a.allocate(CALL_STATE), MemorySegment.ofAddress(address), length);
            if (rc != 0) {
                throw Invariants.violated("munmap of " + length + " bytes at " + address + " failed");
            }
        } catch (IllegalStateException e) {
            throw e;
        } catch (Throwable t) {
            throw Invariants.violated("munmap failed: " + t, t);
        }
    }

    /** The page-aligned range fully inside [from, from + bytes) of {@code segment}: {address, length}, length 0 if none. */
    public static long[] innerPages(MemorySegment segment, long from, long bytes) {
        long a = segment.address() + from;
        long start = (a + PAGE - 1) / PAGE * PAGE;
        long end = (a + bytes) / PAGE * PAGE;
        return new long[] {start, Math.max(0, end - start)};
    }

    /** {@code madvise(advice)} on the pages fully inside [from, from + bytes) of {@code segment}. */
    public static void advise(MemorySegment segment, long from, long bytes, int advice, String what) {
        long[] pages = innerPages(segment, from, bytes);
        if (pages[1] == 0) {
            return;
        }
        int rc;
        int errno;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment state = a.allocate(CALL_STATE);
            rc = (int) MADVISE.invokeExact(state, MemorySegment.ofAddress(pages[0]), pages[1], advice);
            errno = (int) ERRNO.get(state, 0L);
        } catch (Throwable t) {
            throw Invariants.violated(what + " failed: " + t, t);
        }
        if (rc != 0) {
            throw new SymmemException(what + " of " + pages[1] + " bytes failed: madvise(" + advice + ") errno=" + errno
                    + (advice == MADV_REMOVE ? " (the memory's file system cannot free pages; fix: put"
                    + " symmem4j.shm.dir on"
                    + " tmpfs, /dev/shm)" : ""));
        }
    }

    /** Bytes of the pages touching [from, from + bytes) of {@code segment} that hold memory now ({@code mincore}). */
    public static long resident(MemorySegment segment, long from, long bytes) {
        if (bytes <= 0) {
            return 0;
        }
        long a = segment.address() + from;
        long start = a / PAGE * PAGE;
        long end = (a + bytes + PAGE - 1) / PAGE * PAGE;
        long pages = (end - start) / PAGE;
        int rc;
        int errno;
        long count = 0;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(CALL_STATE);
            MemorySegment vec = arena.allocate(pages);
            rc = (int) MINCORE.invokeExact(state, MemorySegment.ofAddress(start), end - start, vec);
            errno = (int) ERRNO.get(state, 0L);
            if (rc == 0) {
                for (long i = 0; i < pages; i++) {
                    count += vec.get(JAVA_BYTE, i) & 1;
                }
            }
        } catch (Throwable t) {
            throw Invariants.violated("mincore failed: " + t, t);
        }
        if (rc != 0) {
            throw Invariants.violated("mincore of " + (end - start) + " bytes failed: errno=" + errno);
        }
        return count * PAGE;
    }
}
