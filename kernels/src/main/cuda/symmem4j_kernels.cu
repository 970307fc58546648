// symmem4j CUDA kernels: signal-pad barrier, ONE_SHOT and TWO_SHOT all-reduce, reduce-scatter,
// all-gather, put-with-signal and wait-signal, over symmetric memory (every rank's buffer mapped in
// every rank through peer access).
//
// Loaded by org.symmem4j.parallel.cuda with cuModuleLoadData and launched with cuLaunchKernel;
// extern "C" names so the Java side finds them. Layout of a signal pad (uint32 slots, per rank):
//
//   [0, MAX_BLOCKS * MAX_RANKS)               barrier slot of (block b, peer p) at b * MAX_RANKS + p
//   [MAX_BLOCKS * MAX_RANKS, + SIGNAL_SLOTS*2) user signal slots, 64-bit each (put/wait-signal)
//
// Barrier protocol (graph safe): block b of rank r signals peer p with a release CAS 0 -> 1 on
// p's slot (b, r) and waits with an acquire CAS 1 -> 0 on its own slot (b, p). Every slot returns
// to zero by itself, so a captured kernel can be replayed any number of times.
//
// Reductions add peers in rank order 0..N-1 in float32 (bf16 is widened exactly and rounded once,
// to nearest even), so every rank gets bitwise-identical results.

#include <cuda/atomic>
#include <cuda_bf16.h>
#include <stdint.h>

#define MAX_RANKS 8
#define MAX_BLOCKS 1024
#define BARRIER_SLOTS (MAX_BLOCKS * MAX_RANKS)

struct Peers {
    void* ptr[MAX_RANKS];
};

struct Pads {
    uint32_t* ptr[MAX_RANKS];
};

using SysU32 = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>;
using SysU64 = cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>;

// Block b of every rank meets here. __syncthreads first, so the release below (at system scope)
// publishes every write this block made before the barrier; the acquire makes every peer block's
// pre-barrier writes visible after it.
__device__ __forceinline__ void barrier_blocks(const Pads& pads, int rank, int world) {
    __syncthreads();
    int peer = threadIdx.x;
    if (peer < world && peer != rank) {
        SysU32 remote(pads.ptr[peer][blockIdx.x * MAX_RANKS + rank]);
        uint32_t expected = 0;
        // release: publishes this block's writes; acquired by the peer's CAS 1 -> 0 below
        while (!remote.compare_exchange_strong(expected, 1u, cuda::memory_order_release, cuda::memory_order_relaxed)) {
            expected = 0;
        }
        SysU32 local(pads.ptr[rank][blockIdx.x * MAX_RANKS + peer]);
        expected = 1;
        // acquire: pairs with the peer's release CAS 0 -> 1
        while (!local.compare_exchange_strong(expected, 0u, cuda::memory_order_acquire, cuda::memory_order_relaxed)) {
            expected = 1;
        }
    }
    __syncthreads();
}

// ---- 16-byte vectors: 4 floats or 8 bf16, accumulated as float ----

template <typename T> struct Vec;

template <> struct Vec<float> {
    static constexpr int N = 4;
    __device__ static void load(const void* base, size_t v, float (&out)[8]) {
        float4 x = reinterpret_cast<const float4*>(base)[v];
        out[0] = x.x; out[1] = x.y; out[2] = x.z; out[3] = x.w;
    }
    __device__ static void store(void* base, size_t v, const float (&in)[8]) {
        reinterpret_cast<float4*>(base)[v] = make_float4(in[0], in[1], in[2], in[3]);
    }
    __device__ static float loadScalar(const void* base, size_t i) { return reinterpret_cast<const float*>(base)[i]; }
    __device__ static void storeScalar(void* base, size_t i, float x) { reinterpret_cast<float*>(base)[i] = x; }
};

template <> struct Vec<__nv_bfloat16> {
    static constexpr int N = 8;
    __device__ static void load(const void* base, size_t v, float (&out)[8]) {
        uint4 raw = reinterpret_cast<const uint4*>(base)[v];
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 f = __bfloat1622float2(h[k]);
            out[2 * k] = f.x;
            out[2 * k + 1] = f.y;
        }
    }
    __device__ static void store(void* base, size_t v, const float (&in)[8]) {
        uint4 raw;
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            h[k] = __floats2bfloat162_rn(in[2 * k], in[2 * k + 1]);
        }
        reinterpret_cast<uint4*>(base)[v] = raw;
    }
    __device__ static float loadScalar(const void* base, size_t i) {
        return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(base)[i]);
    }
    __device__ static void storeScalar(void* base, size_t i, float x) {
        reinterpret_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
    }
};

// acc = sum over ranks, in rank order, of vector v; divided by `divisor` when > 0 (AVG).
template <typename T>
__device__ __forceinline__ void reduce_vector(const Peers& in, int world, size_t v, int divisor, float (&acc)[8]) {
    Vec<T>::load(in.ptr[0], v, acc);
    for (int p = 1; p < world; p++) {
        float x[8];
        Vec<T>::load(in.ptr[p], v, x);
#pragma unroll
        for (int k = 0; k < Vec<T>::N; k++) {
            acc[k] += x[k];
        }
    }
    if (divisor > 0) {
#pragma unroll
        for (int k = 0; k < Vec<T>::N; k++) {
            acc[k] = acc[k] / (float)divisor;
        }
    }
}

template <typename T>
__device__ __forceinline__ float reduce_scalar(const Peers& in, int world, size_t i, int divisor) {
    float acc = Vec<T>::loadScalar(in.ptr[0], i);
    for (int p = 1; p < world; p++) {
        acc += Vec<T>::loadScalar(in.ptr[p], i);
    }
    return divisor > 0 ? acc / (float)divisor : acc;
}

// ---- ONE_SHOT, in place: every rank reads every peer's whole buffer ----
// Barrier (data ready); each thread reduces up to ONE_SHOT_VECS vectors into registers; barrier
// (every peer has read this rank's buffer); store. The launch must cover the message:
// gridDim * blockDim * ONE_SHOT_VECS vectors (the Java side checks it). Elements past the last
// whole vector are reduced by thread 0 of block 0 of every rank, also into registers.

#define ONE_SHOT_VECS 4

template <typename T>
__device__ void one_shot(Peers bufs, Pads pads, size_t count, int rank, int world, int divisor) {
    constexpr int N = Vec<T>::N;
    size_t nvec = count / N;
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float acc[ONE_SHOT_VECS][8];
    float tail[N];
    barrier_blocks(pads, rank, world);
#pragma unroll
    for (int k = 0; k < ONE_SHOT_VECS; k++) {
        size_t v = first + k * threads;
        if (v < nvec) {
            reduce_vector<T>(bufs, world, v, divisor, acc[k]);
        }
    }
    bool tailOwner = blockIdx.x == 0 && threadIdx.x == 0;
    if (tailOwner) {
        for (size_t i = nvec * N; i < count; i++) {
            tail[i - nvec * N] = reduce_scalar<T>(bufs, world, i, divisor);
        }
    }
    barrier_blocks(pads, rank, world);
    void* mine = bufs.ptr[rank];
#pragma unroll
    for (int k = 0; k < ONE_SHOT_VECS; k++) {
        size_t v = first + k * threads;
        if (v < nvec) {
            Vec<T>::store(mine, v, acc[k]);
        }
    }
    if (tailOwner) {
        for (size_t i = nvec * N; i < count; i++) {
            Vec<T>::storeScalar(mine, i, tail[i - nvec * N]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(512) symmem_one_shot_f32(Peers bufs, Pads pads, size_t count, int rank, int world, int divisor) {
    one_shot<float>(bufs, pads, count, rank, world, divisor);
}
extern "C" __global__ void __launch_bounds__(512) symmem_one_shot_bf16(Peers bufs, Pads pads, size_t count, int rank, int world, int divisor) {
    one_shot<__nv_bfloat16>(bufs, pads, count, rank, world, divisor);
}

// ---- TWO_SHOT, in place: reduce-scatter, then all-gather by pushing ----
// Rank r reduces vectors of chunk r from every peer (rank order) and writes the result into
// chunk r of every rank's buffer. Nobody else reads or writes chunk r during the kernel, so the
// writes are safe after the first barrier; the second barrier tells every rank that all chunks
// pushed into its buffer have landed. The last rank also handles elements past the last vector.

template <typename T>
__device__ void two_shot(Peers bufs, Pads pads, size_t count, int rank, int world, int divisor) {
    constexpr int N = Vec<T>::N;
    size_t nvec = count / N;
    size_t chunk = (nvec + world - 1) / world;
    size_t lo = min(nvec, (size_t)rank * chunk);
    size_t hi = min(nvec, lo + chunk);
    size_t threads = (size_t)gridDim.x * blockDim.x;
    barrier_blocks(pads, rank, world);
    for (size_t v = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x; v < hi; v += threads) {
        float acc[8];
        reduce_vector<T>(bufs, world, v, divisor, acc);
        for (int p = 0; p < world; p++) {
            Vec<T>::store(bufs.ptr[p], v, acc);
        }
    }
    if (rank == world - 1 && blockIdx.x == 0 && threadIdx.x == 0) {
        for (size_t i = nvec * N; i < count; i++) {
            float x = reduce_scalar<T>(bufs, world, i, divisor);
            for (int p = 0; p < world; p++) {
                Vec<T>::storeScalar(bufs.ptr[p], i, x);
            }
        }
    }
    barrier_blocks(pads, rank, world);
}

extern "C" __global__ void __launch_bounds__(512) symmem_two_shot_f32(Peers bufs, Pads pads, size_t count, int rank, int world, int divisor) {
    two_shot<float>(bufs, pads, count, rank, world, divisor);
}
extern "C" __global__ void __launch_bounds__(512) symmem_two_shot_bf16(Peers bufs, Pads pads, size_t count, int rank, int world, int divisor) {
    two_shot<__nv_bfloat16>(bufs, pads, count, rank, world, divisor);
}

// ---- reduce-scatter: symmetric input of `world` blocks of `count` elements; block `rank`
// reduced over ranks lands in `out` (any device pointer of this rank). Second barrier: peers may
// overwrite their input only after every rank has read it.

template <typename T>
__device__ void reduce_scatter(Peers bufs, Pads pads, void* out, size_t count, int rank, int world) {
    constexpr int N = Vec<T>::N;
    size_t blockBytes = count * sizeof(T);
    Peers mine;
    for (int p = 0; p < world; p++) {
        mine.ptr[p] = (char*)bufs.ptr[p] + (size_t)rank * blockBytes;
    }
    size_t nvec = count / N;
    size_t threads = (size_t)gridDim.x * blockDim.x;
    barrier_blocks(pads, rank, world);
    bool aligned = (blockBytes % 16) == 0;
    if (aligned) {
        for (size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += threads) {
            float acc[8];
            reduce_vector<T>(mine, world, v, 0, acc);
            Vec<T>::store(out, v, acc);
        }
    }
    size_t scalarFrom = aligned ? nvec * N : 0;
    for (size_t i = scalarFrom + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += threads) {
        Vec<T>::storeScalar(out, i, reduce_scalar<T>(mine, world, i, 0));
    }
    barrier_blocks(pads, rank, world);
}

extern "C" __global__ void __launch_bounds__(512) symmem_reduce_scatter_f32(Peers bufs, Pads pads, void* out, size_t count, int rank, int world) {
    reduce_scatter<float>(bufs, pads, out, count, rank, world);
}
extern "C" __global__ void __launch_bounds__(512) symmem_reduce_scatter_bf16(Peers bufs, Pads pads, void* out, size_t count, int rank, int world) {
    reduce_scatter<__nv_bfloat16>(bufs, pads, out, count, rank, world);
}

// ---- all-gather: `in` (this rank's `bytes`) is pushed into block `rank` of every rank's symmetric
// output. First barrier: every rank's output is free (its last readers are done); second: all
// blocks have landed everywhere.

extern "C" __global__ void __launch_bounds__(512) symmem_all_gather(Peers outs, Pads pads, const void* in, size_t bytes, int rank, int world) {
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    barrier_blocks(pads, rank, world);
    size_t vecs = ((bytes % 16) == 0 && ((uintptr_t)in % 16) == 0) ? bytes / 16 : 0;
    for (int p = 0; p < world; p++) {
        char* dst = (char*)outs.ptr[p] + (size_t)rank * bytes;
        for (size_t v = tid; v < vecs; v += threads) {
            reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(in)[v];
        }
        for (size_t i = vecs * 16 + tid; i < bytes; i += threads) {
            dst[i] = ((const char*)in)[i];
        }
    }
    barrier_blocks(pads, rank, world);
}

// ---- put-with-signal and wait-signal (pipeline hand-off) ----
// put: every block copies its share of `bytes` from `src` to `dst` (a peer's buffer), then counts
// itself done on `done` (a counter in this rank's pad); the last block resets the counter (so the
// kernel replays) and applies the signal to the peer's slot with release at system scope.
// wait: one thread waits with acquire until the slot reaches `value`.

extern "C" __global__ void __launch_bounds__(512) symmem_put_signal(void* dst, const void* src, size_t bytes,
        unsigned int* done, unsigned long long* signal, unsigned long long value, int add) {
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool vector = (bytes % 16) == 0 && ((uintptr_t)src % 16) == 0 && ((uintptr_t)dst % 16) == 0;
    size_t vecs = vector ? bytes / 16 : 0;
    for (size_t v = tid; v < vecs; v += threads) {
        reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(src)[v];
    }
    for (size_t i = vecs * 16 + tid; i < bytes; i += threads) {
        ((char*)dst)[i] = ((const char*)src)[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda::atomic_ref<unsigned int, cuda::thread_scope_device> counter(*done);
        // acq_rel: the last block sees every other block's copy before it signals
        unsigned int finished = counter.fetch_add(1u, cuda::memory_order_acq_rel);
        if (finished == gridDim.x - 1) {
            counter.store(0u, cuda::memory_order_relaxed);
            SysU64 s(*signal);
            // release at system scope: the copy above is visible before the peer sees the signal
            if (add) {
                s.fetch_add(value, cuda::memory_order_release);
            } else {
                s.store(value, cuda::memory_order_release);
            }
        }
    }
}

extern "C" __global__ void symmem_wait_signal(unsigned long long* signal, unsigned long long value) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        SysU64 s(*signal);
        // acquire: pairs with the putter's release; its data is visible to this stream's later work
        while (s.load(cuda::memory_order_acquire) < value) {
        }
    }
}
