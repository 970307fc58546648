// Benchmark kernel, not one of symmem4j's own: how long a kernel that is already running takes to read `bytes` of a
// buffer through a plain device pointer (a peer's shard mapped over NVLink, or its own memory), timed by the GPU's
// clock. GpuRemoteShardBench launches it through org.symmem4j.parallel.DeviceKernels, as a user's kernel that reads a
// DistributedTensor's remote shard zero-copy would; built into its own fatbin
// (org/symmem4j/kernels/bench/remote_read_rounds.fatbin).
//
// One block reads the bytes `rounds` times. In a round every thread loads its 16-byte words with ld.relaxed.sys (so
// no cache on the reader's side serves a later round: each load goes to the memory's own GPU), XORs them, and the
// round ends with the block's XOR reduced through shared memory behind a barrier: a round cannot end before every
// load of it has returned, and the next one starts after it. Thread 0 reads %globaltimer before the first round and
// after the last.
//
// out[0] = nanoseconds for all rounds; out[1] = the check: XOR over the rounds r of (the XOR of every 32-bit word
// read + r), which the host computes from the pattern it wrote. A read of the wrong bytes fails the run.

#include <stdint.h>

#define BLOCK 1024

__device__ __forceinline__ uint4 load_sys(const uint4* p) {
    uint4 v;
    asm volatile("ld.relaxed.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void __launch_bounds__(BLOCK) remote_read_rounds(const uint4* src, uint64_t bytes, int rounds,
                                                                       unsigned long long* out) {
    __shared__ uint32_t warp_xor[BLOCK / 32];
    uint64_t words = bytes / 16;
    uint32_t check = 0;
    uint64_t start = 0;
    __syncthreads();
    if (threadIdx.x == 0) {
        start = global_ns();
    }
    for (int r = 0; r < rounds; r++) {
        uint32_t x = 0;
        for (uint64_t i = threadIdx.x; i < words; i += blockDim.x) {
            uint4 v = load_sys(src + i);
            x ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        for (int d = 16; d > 0; d >>= 1) {
            x ^= __shfl_xor_sync(0xffffffffu, x, d);
        }
        if ((threadIdx.x & 31) == 0) {
            warp_xor[threadIdx.x >> 5] = x;
        }
        __syncthreads(); // every warp's XOR, so every load of this round, is in
        if (threadIdx.x == 0) {
            uint32_t s = 0;
            for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
                s ^= warp_xor[w];
            }
            check ^= s + (uint32_t)r;
        }
        __syncthreads(); // thread 0 has read warp_xor before the next round writes it
    }
    if (threadIdx.x == 0) {
        out[0] = global_ns() - start;
        out[1] = check;
    }
}
