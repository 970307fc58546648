// A user-written one-shot all-reduce (float32, SUM) over symmem4j symmetric memory: the kernel a Java
// user writes and launches through org.symmem4j.parallel.DeviceKernels, as PyTorch's symmetric-memory
// document does with buffer_ptrs and signal_pad_ptrs. Not one of symmem4j's own kernels: built into
// its own fatbin (org/symmem4j/kernels/examples/user_one_shot_all_reduce.fatbin) for the example
// UserKernelAllReduceExample and the GPU test CudaUserKernelTest.
//
// out[i] = buf_0[i] + buf_1[i] + ... + buf_{world-1}[i], added in rank order in float32 — the order
// and arithmetic of symmem4j's ONE_SHOT (which starts from rank 0's value and adds ranks 1.. in
// float32), so the result is bitwise equal to it on every rank.
//
// Synchronization: through the user bytes of the signal pads (DeviceMemory.userPadOffset(); symmem4j
// never touches them), laid out per rank as
//
//   [0, MAX_BLOCKS * MAX_RANKS) uint32   slot (block b, peer p) at b * MAX_RANKS + p: the last epoch
//                                        peer p's block b announced to this rank (peers write it)
//   [MAX_BLOCKS * MAX_RANKS, + MAX_BLOCKS) uint32  epoch counter of this rank's block b (only it writes)
//
// Block b of every rank meets block b of every peer twice per call: before reading the peers'
// buffers (every rank's input is in place) and after (no rank goes on to overwrite its buffer while
// a peer still reads it). The epochs count up in device memory, so a captured graph replays the
// kernel any number of times. Every rank must launch the same grid (block b reads the same elements
// everywhere), of at most MAX_BLOCKS blocks, all resident at once (DeviceFunction.maxCoResidentBlocks).

#include <cuda/atomic>
#include <stdint.h>

#define MAX_RANKS 8
#define MAX_BLOCKS 512

using SysU32 = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>;

// Block b of every rank meets at `epoch`. __syncthreads first, so that the release store (system
// scope) publishes every read and write this block made before the barrier; the acquire load makes
// every peer block's pre-barrier writes (and, through the kernel boundary, its stream's earlier
// work) visible after it. Epochs are compared with wrap-around.
__device__ __forceinline__ void meet(const uint64_t* pads, uint64_t padOffset, int rank, int world, uint32_t epoch) {
    __syncthreads();
    int peer = threadIdx.x;
    if (peer < world && peer != rank) {
        uint32_t* remote = reinterpret_cast<uint32_t*>(pads[peer] + padOffset) + blockIdx.x * MAX_RANKS + rank;
        // release: publishes this block's accesses; acquired by the peer's wait below
        SysU32(*remote).store(epoch, cuda::memory_order_release);
        uint32_t* local = reinterpret_cast<uint32_t*>(pads[rank] + padOffset) + blockIdx.x * MAX_RANKS + peer;
        // acquire: pairs with the peer's release store of the same epoch
        while ((int32_t)(SysU32(*local).load(cuda::memory_order_acquire) - epoch) < 0) {
        }
    }
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(512) user_one_shot_all_reduce_f32(
        const uint64_t* buffer_ptrs, const uint64_t* signal_pad_ptrs, uint64_t user_pad_offset, float* out,
        uint64_t count, int rank, int world) {
    __shared__ uint32_t first_epoch;
    if (threadIdx.x == 0) {
        // only block b of this rank touches its counter, and kernels of a stream run one after another
        uint32_t* counter = reinterpret_cast<uint32_t*>(signal_pad_ptrs[rank] + user_pad_offset)
                + MAX_BLOCKS * MAX_RANKS + blockIdx.x;
        first_epoch = *counter + 1;
        *counter = first_epoch + 1; // two meetings per call
    }
    __syncthreads();
    uint32_t epoch = first_epoch;
    meet(signal_pad_ptrs, user_pad_offset, rank, world, epoch); // every rank's input is in place
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float acc = reinterpret_cast<const float*>(buffer_ptrs[0])[i];
        for (int p = 1; p < world; p++) {
            acc += reinterpret_cast<const float*>(buffer_ptrs[p])[i];
        }
        out[i] = acc;
    }
    meet(signal_pad_ptrs, user_pad_offset, rank, world, epoch + 1); // every rank is done reading
}
