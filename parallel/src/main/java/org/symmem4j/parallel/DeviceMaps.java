package org.symmem4j.parallel;

import java.lang.foreign.MemorySegment;

/**
 * Runs operations of a hash map in GPU symmetric memory by a kernel on this rank's stream: what
 * {@code org.symmem4j.state}'s {@code DeviceHashMap} is built on. Reached through {@link SymmetricMemory#unwrap
 * SymmetricMemory.unwrap(DeviceMaps.class)} on memory of the CUDA transport (empty on host transports); every rank's
 * memory is laid out as {@link org.symmem4j.parallel.layout.HashMapLayout} says (its partition, then its result area
 * at {@link org.symmem4j.parallel.layout.HashMapLayout#deviceOutOffset}).
 *
 * <p>Ordering. The kernel ({@code symmem_map_op}) runs after the work enqueued on this rank's stream before it. It
 * takes a slot of the owner's partition (mapped on this GPU) by {@code atomicCAS} at system scope on the slot word,
 * writes under that lock and unlocks with a release store of the next version (after a system-scope fence); a read
 * copies the value between an acquire read of the word and a second read, and retries when they differ. The call
 * then waits for this rank's stream and copies the result area to the host.
 */
public interface DeviceMaps {

    /**
     * One operation.
     *
     * @param owner      the rank whose partition holds the key
     * @param op         {@link org.symmem4j.parallel.layout.HashMapLayout#OP_GET} ... {@code OP_RETIRE}
     * @param hash       the key's hash (the probe starts at its low bits)
     * @param slotOffset for unlock and retire: the slot's offset in the owner's partition, else 0
     * @param word       for unlock: the LOCKED word lock returned; for retire: the dead holder's word; else 0
     * @param state      for unlock: the state to leave (FULL writes the key and value), else 0
     * @param waitNanos  how long the kernel waits for a LOCKED slot before it answers busy, on the GPU's clock
     */
    record Operation(int owner, int op, long hash, long slotOffset, long word, int state, long waitNanos) {
    }

    /**
     * Runs {@code operation} on this rank's stream and waits for it: the kernel reads the key and value from
     * {@code inline} (copied into its launch parameters), writes its result into this rank's buffer at
     * {@code outOffset}, which is then copied into {@code out}. Synchronous.
     *
     * @param operation what to do
     * @param inline    key words then value words, zero-padded, at most
     *                  {@link org.symmem4j.parallel.layout.HashMapLayout#DEVICE_INLINE_BYTES} bytes
     * @param outOffset the result area's offset in this rank's buffer
     * @param out       host memory, filled from the result area
     * @throws IllegalArgumentException for an inline block that is too large
     * @throws IndexOutOfBoundsException for a result area outside this rank's buffer
     */
    void runMapOperation(Operation operation, MemorySegment inline, long outOffset, MemorySegment out);
}
