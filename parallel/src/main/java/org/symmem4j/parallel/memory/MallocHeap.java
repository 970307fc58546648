package org.symmem4j.parallel.memory;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;
import java.util.Optional;
import org.symmem4j.parallel.Invariants;

/**
 * The C library's allocator ({@code malloc}) of this process, as glibc reports it ({@code mallinfo2}, every arena
 * summed) and trims it ({@code malloc_trim}). Native code that allocates with {@code malloc} (ND4J's CPU arrays,
 * the JVM's own bookkeeping, OpenMP) shows here: what it holds in use, and what it freed but the allocator keeps
 * resident for later. Diagnostics for the layers above (how much of a process's resident set is freed memory);
 * absent on a C library without these calls ({@link #available()}).
 */
public final class MallocHeap {

    private static final Linker LINKER = Linker.nativeLinker();
    /** glibc's struct mallinfo2: ten size_t fields. */
    private static final MemoryLayout MALLINFO2 = MemoryLayout.structLayout(JAVA_LONG.withName("arena"),
            JAVA_LONG.withName("ordblks"), JAVA_LONG.withName("smblks"), JAVA_LONG.withName("hblks"),
            JAVA_LONG.withName("hblkhd"), JAVA_LONG.withName("usmblks"), JAVA_LONG.withName("fsmblks"),
            JAVA_LONG.withName("uordblks"), JAVA_LONG.withName("fordblks"), JAVA_LONG.withName("keepcost"));
    private static final MethodHandle MALLINFO = find("mallinfo2", FunctionDescriptor.of(MALLINFO2));
    private static final MethodHandle TRIM = find("malloc_trim", FunctionDescriptor.of(JAVA_INT, JAVA_LONG));

    private MallocHeap() {
    }

    /**
     * What the allocator holds, in bytes.
     *
     * @param arenaBytes  obtained from the system for its arenas (main and per-thread), not counting large blocks
     * @param mappedBytes in large blocks mapped one by one ({@code mmap}), each in use (freed ones are unmapped)
     * @param inUseBytes  allocated and not freed, in the arenas
     * @param freeBytes   freed but kept in the arenas (resident where once written, unless trimmed)
     */
    public record Info(long arenaBytes, long mappedBytes, long inUseBytes, long freeBytes) {
    }

    /**
     * {@return whether this C library reports and trims its allocator (glibc 2.33 and later)}
     */
    public static boolean available() {
        return MALLINFO != null && TRIM != null;
    }

    /**
     * The allocator's state now, every arena summed.
     *
     * @return the state
     * @throws UnsupportedOperationException when the C library has no {@code mallinfo2} (see {@link #available()})
     */
    public static Info info() {
        require();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment s = (MemorySegment) MALLINFO.invokeExact((java.lang.foreign.SegmentAllocator) arena);
            // arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost
            return new Info(s.getAtIndex(JAVA_LONG, 0), s.getAtIndex(JAVA_LONG, 4), s.getAtIndex(JAVA_LONG, 7),
                    s.getAtIndex(JAVA_LONG, 8));
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw Invariants.violated("mallinfo2 failed: " + t, t);
        }
    }

    /**
     * Gives the pages of freed memory in every arena back to the system ({@code malloc_trim(0)}); nothing in use moves.
     *
     * @return whether any memory was given back
     * @throws UnsupportedOperationException when the C library has no {@code malloc_trim} (see {@link #available()})
     */
    public static boolean trim() {
        require();
        try {
            return (int) TRIM.invokeExact(0L) != 0;
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw Invariants.violated("malloc_trim failed: " + t, t);
        }
    }

    private static void require() {
        if (!available()) {
            throw new UnsupportedOperationException("this C library has no mallinfo2/malloc_trim: expected glibc 2.33 or"
                    + " later (fix: check MallocHeap.available() first, or run on a glibc Linux)");
        }
    }

    private static MethodHandle find(String name, FunctionDescriptor d) {
        Optional<MemorySegment> symbol = LINKER.defaultLookup().find(name);
        return symbol.map(s -> LINKER.downcallHandle(s, d)).orElse(null);
    }
}
