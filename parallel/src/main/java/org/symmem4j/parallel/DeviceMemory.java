package org.symmem4j.parallel;

/**
 * The GPU-only view of symmetric memory, reached through
 * {@link SymmetricMemory#unwrap SymmetricMemory.unwrap(DeviceMemory.class)}: the device addresses a
 * kernel of the caller's own needs to read and write every rank's buffer and signal pad directly
 * (PyTorch's {@code buffer_ptrs} and {@code signal_pad_ptrs}; launch such kernels with
 * {@link DeviceKernels}).
 *
 * <h2>A signal pad</h2>
 * Every rank's pad is {@link #signalPadBytes()} bytes of its GPU's memory, zero when allocated:
 * <pre>
 *   offset                      bytes                        used by
 *   0                           userPadOffset()              symmem4j: the collectives' barriers on this
 *                                                            memory (TWO_SHOT, reduce-scatter, all-gather),
 *                                                            the signal slots, the put kernel's counter
 *     signalSlotOffset(s)       8 per slot                   putWithSignal / signal / waitSignal slot s
 *   userPadOffset()             userPadBytes()               the caller's kernels only: never read or
 *                                                            written by symmem4j
 * </pre>
 * A kernel of the caller's own may use the user bytes freely (e.g. its own barrier flags, as the
 * example {@code UserKernelAllReduceExample} does), and may also wait on or write the signal slots
 * with the meaning {@link SymmetricMemory#putWithSignal} gives them. The rest belongs to the
 * collectives: writing it corrupts their barriers.
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
     * Rank {@code rank}'s signal pad as mapped on this rank's GPU: the start of the layout above.
     *
     * @param rank a rank of the group
     * @return the device address, valid in kernels running on this rank's GPU
     * @throws IndexOutOfBoundsException when {@code rank} is not a rank of the group
     */
    long signalPadPointer(int rank);

    /**
     * A device-resident table of every rank's {@link #bufferPointer}: {@code worldSize} 64-bit
     * addresses, entry r for rank r (PyTorch's {@code buffer_ptrs_dev}), for a kernel that indexes
     * peers by a run-time rank. Made at the first call of this or {@link #signalPadPointerTable}
     * (a synchronous copy: make it before {@link DeviceCommunicator#capture}, which refuses it), freed
     * with this memory.
     *
     * @return the table's device address on this rank's GPU ({@code uint64_t*} / {@code T**})
     */
    long bufferPointerTable();

    /**
     * A device-resident table of every rank's {@link #signalPadPointer}, as {@link #bufferPointerTable}.
     *
     * @return the table's device address on this rank's GPU
     */
    long signalPadPointerTable();

    /**
     * The size of every rank's signal pad.
     *
     * @return bytes
     */
    long signalPadBytes();

    /**
     * Where in every rank's signal pad the bytes reserved for the caller's kernels begin; 16-byte aligned.
     *
     * @return byte offset from {@link #signalPadPointer}
     */
    long userPadOffset();

    /**
     * How many bytes of every rank's signal pad, from {@link #userPadOffset()}, belong to the
     * caller's kernels; zero when the memory was allocated, and never touched by symmem4j.
     *
     * @return bytes
     */
    long userPadBytes();

    /**
     * Where signal slot {@code slot} (a 64-bit word: {@link SymmetricMemory#putWithSignal},
     * {@link SymmetricMemory#waitSignal}) lies in every rank's signal pad.
     *
     * @param slot 0..{@link SymmetricMemory#signalSlots()}-1
     * @return byte offset from {@link #signalPadPointer}
     * @throws IndexOutOfBoundsException when {@code slot} is outside the slots
     */
    long signalSlotOffset(int slot);
}
