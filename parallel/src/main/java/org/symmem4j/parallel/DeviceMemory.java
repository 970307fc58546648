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

    /**
     * Enqueues on this rank's stream a wait until signal slot {@code slot} of this rank's pad holds at
     * least {@code atLeast} (acquire: the stream's later work sees the data put before the signal),
     * and returns at once, unlike {@link SymmetricMemory#waitSignal}, which waits on the host. With
     * {@code consume} the wait then subtracts {@code atLeast}, so the slot counts like a semaphore and a
     * captured graph of puts and waits replays with the same thresholds. Unbounded on the device: pair
     * every wait with a put that will come.
     *
     * @param slot    the signal slot of this rank's pad, 0..{@link SymmetricMemory#signalSlots()} - 1
     * @param atLeast the value to wait for
     * @param consume whether to subtract {@code atLeast} once reached
     * @throws IndexOutOfBoundsException when {@code slot} is out of range
     */
    void enqueueWaitSignal(int slot, long atLeast, boolean consume);
}
