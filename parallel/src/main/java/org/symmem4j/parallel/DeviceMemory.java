package org.symmem4j.parallel;

/**
 * The GPU-only view of symmetric memory, reached through
 * {@link SymmetricMemory#unwrap SymmetricMemory.unwrap(DeviceMemory.class)}: the device addresses a
 * kernel of the caller's own needs to read and write every rank's buffer and signal pad directly
 * (PyTorch's {@code buffer_ptrs} and {@code signal_pad_ptrs}).
 */
public interface DeviceMemory {

    /**
     * Rank {@code rank}'s buffer as mapped on this rank's GPU.
     *
     * @param rank a rank of the group
     * @return the device address, valid in kernels running on this rank's GPU
     * @throws IndexOutOfBoundsException when {@code rank} is not a rank of the group
     */
    long bufferPointer(int rank);

    /**
     * Rank {@code rank}'s signal pad as mapped on this rank's GPU: {@link SymmetricMemory#signalSlots()}
     * 64-bit slots.
     *
     * @param rank a rank of the group
     * @return the device address, valid in kernels running on this rank's GPU
     * @throws IndexOutOfBoundsException when {@code rank} is not a rank of the group
     */
    long signalPadPointer(int rank);
}
