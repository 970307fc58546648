package org.symmem4j.parallel.multinode;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import org.symmem4j.parallel.DType;

/** Host staging of a {@link HierarchicalSchedule}: segments of one shared arena, freed together at {@link #close}. */
final class HostStaging implements StagingMemory {

    private final Arena arena = Arena.ofShared();

    @Override
    public boolean stagesEveryAllReduce() {
        return true;
    }

    @Override
    public MemorySegment allocate(long bytes) {
        return arena.allocate(bytes, 64);
    }

    /** Kept until {@link #close}: the arena frees its segments together. */
    @Override
    public void free(MemorySegment buffer) {
    }

    @Override
    public void copy(MemorySegment dst, MemorySegment src) {
        MemorySegment.copy(src, 0, dst, 0, src.byteSize());
    }

    @Override
    public void zero(MemorySegment region) {
        region.fill((byte) 0);
    }

    @Override
    public void divide(MemorySegment buffer, long count, DType dtype, int by) {
        if (dtype == DType.FLOAT32) {
            for (long i = 0; i < count; i++) {
                buffer.setAtIndex(ValueLayout.JAVA_FLOAT, i, buffer.getAtIndex(ValueLayout.JAVA_FLOAT, i) / by);
            }
        } else {
            for (long i = 0; i < count; i++) {
                buffer.setAtIndex(ValueLayout.JAVA_DOUBLE, i, buffer.getAtIndex(ValueLayout.JAVA_DOUBLE, i) / by);
            }
        }
    }

    @Override
    public void close() {
        arena.close();
    }
}
