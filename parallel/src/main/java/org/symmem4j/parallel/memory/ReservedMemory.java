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
}
