package org.symmem4j.parallel.memory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * Private host memory that is only reserved: address space whose pages hold no memory until they are written
 * ({@code mmap} of anonymous, uncommitted memory, as sparse symmetric memory is). For arrays that a library insists
 * on having whole but that are never written as a whole: a stage-3 trainer's local model (ZeRO's parameters,
 * gradient and updater state live in the workers' shards), whose views DL4J builds but never fills. Reading an
 * unwritten page yields zeros and holds no memory of its own.
 */
public final class ReservedMemory {

    private ReservedMemory() {
    }

    /**
     * Reserves {@code bytes} of address space.
     *
     * @param bytes at least 1
     * @param arena unmaps the reservation when it closes (an automatic arena: when the segment is unreachable)
     * @return a segment of {@code bytes} bytes, page aligned, reading zeros until written
     * @throws IllegalArgumentException when {@code bytes} is below 1
     * @throws org.symmem4j.parallel.SymmemException when the system refuses the reservation
     */
    public static MemorySegment reserve(long bytes, Arena arena) {
        if (bytes < 1) {
            throw new IllegalArgumentException("reserved memory of " + bytes + " bytes: expected at least 1"
                    + " (fix: reserve the bytes the model needs)");
        }
        return Pages.reserve(bytes, arena);
    }

    /**
     * Bytes of the pages of {@code segment} that hold memory now ({@code mincore}).
     *
     * @param segment memory of this process
     * @return resident bytes, a multiple of the page size
     */
    public static long residentBytes(MemorySegment segment) {
        return Pages.resident(segment, 0, segment.byteSize());
    }

    /**
     * Bytes of the pages touching {@code [from, from + bytes)} of {@code segment} that hold memory now ({@code mincore}).
     *
     * @param segment memory of this process
     * @param from    first byte of the range
     * @param bytes   length of the range
     * @return resident bytes, a multiple of the page size
     */
    public static long residentBytes(MemorySegment segment, long from, long bytes) {
        java.util.Objects.checkFromIndexSize(from, bytes, segment.byteSize());
        return Pages.resident(segment, from, bytes);
    }

    /**
     * Gives the pages that lie fully inside {@code [from, from + bytes)} of {@code segment} back to the operating system
     * ({@code madvise(MADV_DONTNEED)}): they read as zero afterwards and hold no memory until written again. Bytes of
     * the pages at either end that the range covers only in part keep their values. Only for <em>private</em>
     * anonymous memory of this process (reserved memory, or a malloc'd array such as ND4J's host buffers, whose
     * allocator metadata lies outside the pages inside the array): a shared mapping keeps its pages (use
     * {@code SymmetricMemory.decommit} for symmetric memory). What the pipeline's ZeRO stage 3 releases the parts of a
     * stage's parameters and gradient that other replicas own with, between steps.
     *
     * @param segment private anonymous memory of this process
     * @param from    first byte of the range
     * @param bytes   length of the range
     * @throws IndexOutOfBoundsException when the range falls outside {@code segment}
     */
    public static void giveBack(MemorySegment segment, long from, long bytes) {
        java.util.Objects.checkFromIndexSize(from, bytes, segment.byteSize());
        Pages.advise(segment, from, bytes, Pages.MADV_DONTNEED, "giving pages back");
    }
}
