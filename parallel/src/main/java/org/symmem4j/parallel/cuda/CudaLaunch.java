package org.symmem4j.parallel.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;

/**
 * Builds the {@code void** kernelParams} array of a launch: each argument's value in its own
 * native slot, and an array of pointers to the slots, in parameter order. Struct parameters (the
 * kernels' {@code Peers} and {@code Pads}: eight 64-bit pointers) are a slot of 64 bytes.
 */
final class CudaLaunch {

    private final Arena arena;
    private final List<MemorySegment> slots = new ArrayList<>();

    CudaLaunch(Arena arena) {
        this.arena = arena;
    }

    CudaLaunch pointer(long devicePointer) {
        MemorySegment s = arena.allocate(ValueLayout.JAVA_LONG);
        s.set(ValueLayout.JAVA_LONG, 0, devicePointer);
        slots.add(s);
        return this;
    }

    /** A {@code size_t} or {@code unsigned long long}. */
    CudaLaunch size(long value) {
        return pointer(value);
    }

    CudaLaunch integer(int value) {
        MemorySegment s = arena.allocate(ValueLayout.JAVA_INT);
        s.set(ValueLayout.JAVA_INT, 0, value);
        slots.add(s);
        return this;
    }

    /** A {@code float}. */
    CudaLaunch floating(float value) {
        MemorySegment s = arena.allocate(ValueLayout.JAVA_FLOAT);
        s.set(ValueLayout.JAVA_FLOAT, 0, value);
        slots.add(s);
        return this;
    }

    /** A struct of {@link CudaKernels#MAX_RANKS} pointers; unused entries are null. */
    CudaLaunch pointers(long[] values) {
        MemorySegment s = arena.allocate(MemoryLayout.sequenceLayout(CudaKernels.MAX_RANKS, ValueLayout.JAVA_LONG));
        for (int i = 0; i < values.length; i++) {
            s.setAtIndex(ValueLayout.JAVA_LONG, i, values[i]);
        }
        slots.add(s);
        return this;
    }

    /** A struct of {@code slotBytes} bytes passed by value: {@code bytes} at its start, zeros after. */
    CudaLaunch bytes(MemorySegment bytes, int slotBytes) {
        MemorySegment s = arena.allocate(slotBytes, Long.BYTES);
        MemorySegment.copy(bytes, 0, s, 0, Math.min(bytes.byteSize(), slotBytes));
        slots.add(s);
        return this;
    }

    /** The {@code void**} array. */
    MemorySegment array() {
        MemorySegment arr = arena.allocate(ValueLayout.ADDRESS, slots.size());
        for (int i = 0; i < slots.size(); i++) {
            arr.setAtIndex(ValueLayout.ADDRESS, i, slots.get(i));
        }
        return arr;
    }
}
