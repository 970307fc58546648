package org.symmem4j.parallel;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/**
 * The arguments of one {@link DeviceFunction#launch}, in parameter order, each typed as the CUDA C
 * parameter it fills: {@code T*} / {@code uint64_t} → {@link #pointer}, {@code int} → {@link #int32},
 * {@code size_t} / {@code long long} → {@link #int64}, {@code float} → {@link #float32},
 * {@code double} → {@link #float64}, a struct passed by value → {@link #struct}. Values are kept in
 * the GPU's byte order (little-endian). Reusable: a launch copies them.
 */
public final class KernelArguments {

    private final List<byte[]> values = new ArrayList<>();
    private final List<String> kinds = new ArrayList<>();

    /** No arguments yet. */
    public KernelArguments() {
    }

    private KernelArguments add(String kind, int bytes, java.util.function.Consumer<ByteBuffer> write) {
        ByteBuffer b = ByteBuffer.allocate(bytes).order(ByteOrder.LITTLE_ENDIAN);
        write.accept(b);
        values.add(b.array());
        kinds.add(kind);
        return this;
    }

    /**
     * A device address ({@code T*}, 8 bytes).
     *
     * @param deviceAddress e.g. {@link DeviceMemory#bufferPointer} or {@link DeviceMemory#bufferPointerTable}
     * @return this
     */
    public KernelArguments pointer(long deviceAddress) {
        return add("pointer", 8, b -> b.putLong(deviceAddress));
    }

    /**
     * A device buffer's address ({@code T*}, 8 bytes), e.g. from {@link DeviceCommunicator#allocateDevice}.
     *
     * @param deviceBuffer a segment whose address is a device address
     * @return this
     */
    public KernelArguments pointer(MemorySegment deviceBuffer) {
        return pointer(deviceBuffer.address());
    }

    /**
     * A 32-bit integer ({@code int}, {@code unsigned}).
     *
     * @param value the value
     * @return this
     */
    public KernelArguments int32(int value) {
        return add("int32", 4, b -> b.putInt(value));
    }

    /**
     * A 64-bit integer ({@code size_t}, {@code long long}).
     *
     * @param value the value
     * @return this
     */
    public KernelArguments int64(long value) {
        return add("int64", 8, b -> b.putLong(value));
    }

    /**
     * A {@code float}.
     *
     * @param value the value
     * @return this
     */
    public KernelArguments float32(float value) {
        return add("float32", 4, b -> b.putFloat(value));
    }

    /**
     * A {@code double}.
     *
     * @param value the value
     * @return this
     */
    public KernelArguments float64(double value) {
        return add("float64", 8, b -> b.putDouble(value));
    }

    /**
     * A struct passed by value, as its bytes laid out the way the kernel's C compiler lays it out
     * (little-endian, padding included).
     *
     * @param bytes the struct's bytes
     * @return this
     * @throws IllegalArgumentException when {@code bytes} is empty
     */
    public KernelArguments struct(byte[] bytes) {
        if (bytes.length == 0) {
            throw new IllegalArgumentException("struct argument of 0 bytes, expected at least 1 (a C struct has at"
                    + " least 1; fix: pass the struct's bytes as the kernel declares it)");
        }
        values.add(bytes.clone());
        kinds.add("struct");
        return this;
    }

    /**
     * The number of arguments.
     *
     * @return arguments added so far
     */
    public int count() {
        return values.size();
    }

    /**
     * Argument {@code index}'s size.
     *
     * @param index 0..count()-1
     * @return bytes
     */
    public int byteSize(int index) {
        return values.get(index).length;
    }

    /**
     * Argument {@code index}'s bytes, little-endian.
     *
     * @param index 0..count()-1
     * @return a copy of its bytes
     */
    public byte[] bytes(int index) {
        return values.get(index).clone();
    }

    /**
     * Argument {@code index}'s kind, for messages.
     *
     * @param index 0..count()-1
     * @return {@code pointer}, {@code int32}, {@code int64}, {@code float32}, {@code float64} or {@code struct}
     */
    public String kind(int index) {
        return kinds.get(index);
    }

    @Override
    public String toString() {
        StringBuilder s = new StringBuilder("KernelArguments[");
        for (int i = 0; i < values.size(); i++) {
            s.append(i == 0 ? "" : ", ").append(kinds.get(i)).append('(').append(values.get(i).length).append(" B)");
        }
        return s.append(']').toString();
    }
}
