// symmem4j CUDA kernels: signal-pad barrier, ONE_SHOT and TWO_SHOT all-reduce, reduce-scatter,
// all-gather, put-with-signal and wait-signal, over symmetric memory (every rank's buffer mapped in
// every rank through peer access).
//
// Loaded by org.symmem4j.parallel.cuda with cuModuleLoadData and launched with cuLaunchKernel;
// extern "C" names so the Java side finds them. Layout of a signal pad (uint32 slots, per rank):
//
//   [0, MAX_BLOCKS * MAX_RANKS)        barrier slot (block b, peer p) at b * MAX_RANKS + p: the last
//                                      epoch peer p's block b announced to this rank (peers write it)
//   [EPOCHS, + MAX_BLOCKS)             epoch counter of this rank's block b (only that block writes it)
//   [SIGNALS, + 2 * SIGNAL_SLOTS)      user signal slots, 64-bit each (put/wait-signal)
//   [DONE]                             blocks-done counter of the put kernel
//
// Barrier protocol (graph safe): block b of every rank counts its barriers in its epoch counter;
// at a barrier it stores the new epoch into slot (b, r) of every peer's pad with release at system
// scope — a posted write, no round trip — and waits with acquire until its own slot (b, p) of
// every peer reaches that epoch. Ranks run the same collectives with the same grids, so their
// counters move in step; the counters live in device memory, so a captured kernel replays safely
// any number of times. (An earlier version used a remote CAS 0 -> 1 / local CAS 1 -> 0, which
// returns slots to zero but costs a round trip over NVLink per signal: one-shot all-reduce of
// 1 KiB took 7 us against NCCL's 3.6 us.)
//
// Reductions add peers in rank order 0..N-1 in float32 (bf16 is widened exactly and rounded once,
// to nearest even), so every rank gets bitwise-identical results.

#include <cuda/atomic>
#include <cuda_bf16.h>
#include <stdint.h>

#define MAX_RANKS 8
#define MAX_BLOCKS 1024
#define BARRIER_SLOTS (MAX_BLOCKS * MAX_RANKS)
#define EPOCHS BARRIER_SLOTS
#define SIGNALS_U32 (EPOCHS + MAX_BLOCKS)

// Pointer tables passed by value as kernel parameters. Kernels declare them __grid_constant__ and
// helpers take them by const reference, so an index known only at run time (this rank, a peer
// thread's rank) reads the parameter bank directly; a by-value copy indexed at run time would be
// placed in local memory (a 128-byte stack frame per kernel, measured at 30-50 us per eager launch).
struct Peers {
    void* ptr[MAX_RANKS];
};

struct Pads {
    uint32_t* ptr[MAX_RANKS];
};

using SysU32 = cuda::atomic_ref<uint32_t, cuda::thread_scope_system>;
using SysU64 = cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>;

// Programmatic dependent launch (PDL; sm_90 and newer). The Java side launches every kernel with
// programmatic stream serialization, so the next kernel on the stream may be scheduled before this
// one ends. Each kernel first waits (griddepcontrol.wait) until the previous kernel on its stream
// has completed and its writes are visible, before it touches any memory: ordering is exactly that
// of plain launches. Then it lets the next kernel be scheduled (griddepcontrol.launch_dependents),
// which waits the same way; what overlaps is only that kernel's launch latency with this kernel's
// run (about 1 us per back-to-back kernel). Both instructions are no-ops for a plain launch, and
// the block is compiled out for older GPUs. Every block of this grid is resident before the next
// grid can start (the trigger counts all blocks), so cross-rank barriers cannot be starved of SMs.
__device__ __forceinline__ void follow_stream_order_release_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Claims `n` consecutive barrier epochs for this block: returns its counter plus one and stores
// the counter plus n back (only this block of this rank touches its counter, and kernels on a
// stream run in order, so plain accesses suffice). Every thread reads the counter itself, so no
// shared memory is needed: the first barrier orders an earlier call's store (same kernel) before
// these reads, the second orders all reads before the new store.
__device__ __forceinline__ uint32_t claim_epochs(const Pads& pads, int rank, uint32_t n) {
    uint32_t* counter = pads.ptr[rank] + EPOCHS + blockIdx.x;
    __syncthreads();
    uint32_t first = *reinterpret_cast<volatile uint32_t*>(counter) + 1;
    __syncthreads();
    if (threadIdx.x == 0) {
        *counter = first + n - 1;
    }
    return first;
}

// This block's next barrier epoch.
__device__ __forceinline__ uint32_t next_epoch(const Pads& pads, int rank) {
    return claim_epochs(pads, rank, 1);
}

// Block b of every rank meets at `epoch`. __syncthreads first, so the release store (at system
// scope) publishes every write this block made before the barrier; the acquire load makes every
// peer block's pre-barrier writes visible after it. Epochs are compared with wrap-around.
__device__ __forceinline__ void meet(const Pads& pads, int rank, int world, uint32_t epoch) {
    __syncthreads();
    int peer = threadIdx.x;
    if (peer < world && peer != rank) {
        SysU32 remote(pads.ptr[peer][blockIdx.x * MAX_RANKS + rank]);
        // release: publishes this block's writes; acquired by the peer's wait below
        remote.store(epoch, cuda::memory_order_release);
        SysU32 local(pads.ptr[rank][blockIdx.x * MAX_RANKS + peer]);
        // acquire: pairs with the peer's release store of the same epoch
        while ((int32_t)(local.load(cuda::memory_order_acquire) - epoch) < 0) {
        }
    }
    __syncthreads();
}

__device__ __forceinline__ void barrier_blocks(const Pads& pads, int rank, int world) {
    meet(pads, rank, world, next_epoch(pads, rank));
}

// ---- 16-byte vectors: 4 floats or 8 bf16, accumulated as float ----

template <typename T> struct Vec;

template <> struct Vec<float> {
    static constexpr int N = 4;
    __device__ static void unpack(const uint4& raw, float (&out)[8]) {
        out[0] = __uint_as_float(raw.x); out[1] = __uint_as_float(raw.y);
        out[2] = __uint_as_float(raw.z); out[3] = __uint_as_float(raw.w);
    }
    __device__ static void load(const void* base, size_t v, float (&out)[8]) {
        unpack(reinterpret_cast<const uint4*>(base)[v], out);
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
        unpack(reinterpret_cast<const uint4*>(base)[v], out);
    }
    __device__ static void unpack(const uint4& raw, float (&out)[8]) {
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

// The ranks a rank loop covers: W > 0 is exactly W ranks, known at compile time (no guard left in
// the code); W == 0 is `world` ranks, at most MAX_RANKS, known at run time. Rank loops run to the
// compile-time bound with this guard, so every pointer index is a constant and the pointers stay in
// registers (a run-time index would copy the struct to local memory).
template <int W> struct Ranks {
    static constexpr int BOUND = W > 0 ? W : MAX_RANKS;
    __device__ static __forceinline__ bool has(int p, int world) { return W > 0 ? p < W : p < world; }
};

// Vector v of every rank's input, all loads issued before any is used. A load from a peer over
// NVLink takes about a microsecond; summing inside the guarded rank loop made each rank's load wait
// for the previous rank's (the compiler does not move a load above the branch that guards it), so a
// thread paid world - 1 remote latencies in a row instead of one.
template <int W>
__device__ __forceinline__ void load_vectors(const Peers& in, int world, size_t v, uint4 (&raw)[Ranks<W>::BOUND]) {
#pragma unroll
    for (int p = 0; p < Ranks<W>::BOUND; p++) {
        if (Ranks<W>::has(p, world)) {
            raw[p] = reinterpret_cast<const uint4*>(in.ptr[p])[v];
        }
    }
}

// acc = sum over ranks, in rank order, of the loaded vectors; divided by `divisor` when > 0 (AVG).
template <typename T, int W>
__device__ __forceinline__ void sum_vectors(const uint4 (&raw)[Ranks<W>::BOUND], int world, int divisor, float (&acc)[8]) {
    Vec<T>::unpack(raw[0], acc);
#pragma unroll
    for (int p = 1; p < Ranks<W>::BOUND; p++) {
        if (Ranks<W>::has(p, world)) {
            float x[8];
            Vec<T>::unpack(raw[p], x);
#pragma unroll
            for (int k = 0; k < Vec<T>::N; k++) {
                acc[k] += x[k];
            }
        }
    }
    if (divisor > 0) {
#pragma unroll
        for (int k = 0; k < Vec<T>::N; k++) {
            acc[k] = acc[k] / (float)divisor;
        }
    }
}

// acc = sum over ranks, in rank order, of vector v; divided by `divisor` when > 0 (AVG).
template <typename T, int W = 0>
__device__ __forceinline__ void reduce_vector(const Peers& in, int world, size_t v, int divisor, float (&acc)[8]) {
    uint4 raw[Ranks<W>::BOUND];
    load_vectors<W>(in, world, v, raw);
    sum_vectors<T, W>(raw, world, divisor, acc);
}

template <typename T>
__device__ __forceinline__ float reduce_scalar(const Peers& in, int world, size_t i, int divisor) {
    float acc = Vec<T>::loadScalar(in.ptr[0], i);
#pragma unroll
    for (int p = 1; p < MAX_RANKS; p++) {
        if (p < world) {
            acc += Vec<T>::loadScalar(in.ptr[p], i);
        }
    }
    return divisor > 0 ? acc / (float)divisor : acc;
}

// ---- ONE_SHOT, in place, by pushing: one barrier per all-reduce ----
// Each rank writes its buffer into slot `rank` of every peer's scratch (posted writes over NVLink),
// meets the peers once, then reduces locally: its own buffer and the slots the peers wrote into
// its scratch, in rank order, into its buffer. Scratch per rank: two parities of `world` slots of
// `slotBytes`; the parity is the barrier epoch's, so consecutive all-reduces alternate and a rank
// never overwrites a slot a peer may still read (it has met that peer since the peer last read
// it). Block b pushes and reads the same vectors on every rank (same grid everywhere), so
// block-level meeting suffices. Elements past the last whole vector go through thread 0 of block 0.

template <typename T>
__device__ void one_shot_push(void* buf, const Peers& scratch, const Pads& pads, size_t count, int rank, int world, int divisor,
                              size_t slotBytes) {
    constexpr int N = Vec<T>::N;
    size_t nvec = count / N;
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t epoch = next_epoch(pads, rank);
    size_t parity = epoch & 1u;
    size_t mySlot = (parity * world + rank) * slotBytes;
    for (size_t v = first; v < nvec; v += threads) {
        uint4 x = reinterpret_cast<const uint4*>(buf)[v];
#pragma unroll
        for (int p = 0; p < MAX_RANKS; p++) {
            if (p < world && p != rank) {
                reinterpret_cast<uint4*>((char*)scratch.ptr[p] + mySlot)[v] = x;
            }
        }
    }
    bool tailOwner = blockIdx.x == 0 && threadIdx.x == 0;
    if (tailOwner) {
        for (size_t i = nvec * N; i < count; i++) {
            T x = reinterpret_cast<const T*>(buf)[i];
            for (int p = 0; p < world; p++) {
                if (p != rank) {
                    reinterpret_cast<T*>((char*)scratch.ptr[p] + mySlot)[i] = x;
                }
            }
        }
    }
    meet(pads, rank, world, epoch);
    Peers in;
    char* myScratch = (char*)scratch.ptr[rank];
#pragma unroll
    for (int r = 0; r < MAX_RANKS; r++) {
        in.ptr[r] = r == rank ? buf : (void*)(myScratch + (parity * world + r) * slotBytes);
    }
    for (size_t v = first; v < nvec; v += threads) {
        float acc[8];
        reduce_vector<T>(in, world, v, divisor, acc);
        Vec<T>::store(buf, v, acc);
    }
    if (tailOwner) {
        for (size_t i = nvec * N; i < count; i++) {
            Vec<T>::storeScalar(buf, i, reduce_scalar<T>(in, world, i, divisor));
        }
    }
}

extern "C" __global__ void __launch_bounds__(512) symmem_one_shot_f32(void* buf, const __grid_constant__ Peers scratch, const __grid_constant__ Pads pads, size_t count,
        int rank, int world, int divisor, size_t slotBytes) {
    follow_stream_order_release_next();
    one_shot_push<float>(buf, scratch, pads, count, rank, world, divisor, slotBytes);
}
extern "C" __global__ void __launch_bounds__(512) symmem_one_shot_bf16(void* buf, const __grid_constant__ Peers scratch, const __grid_constant__ Pads pads, size_t count,
        int rank, int world, int divisor, size_t slotBytes) {
    follow_stream_order_release_next();
    one_shot_push<__nv_bfloat16>(buf, scratch, pads, count, rank, world, divisor, slotBytes);
}

// ---- ONE_SHOT for small messages: LL (low-latency) protocol, no barrier at all ----
// Each 4-byte word of payload travels with the block's epoch in one 8-byte store (single-copy
// atomic), so a reader that sees the epoch in a word has that word's data: no fence, no flag to
// wait for separately (a release fence at system scope waits for the NVLink write acknowledgments,
// a round trip). Rank r writes its words into slot r of every peer's LL scratch (two parities of
// `world` slots of `slotWords` 8-byte words), then each thread reduces the same words it wrote, in
// rank order, polling each peer's word until it carries the epoch. Parity alternates with the
// epoch: a rank writing a slot again (two all-reduces later) has since read that peer's words of
// the all-reduce in between, which the peer wrote only after it had read this slot.

template <typename T>
__device__ __forceinline__ uint32_t load_word(const void* buf, size_t w, size_t bytes) {
    size_t at = w * 4;
    if (at + 4 <= bytes) {
        return reinterpret_cast<const uint32_t*>(buf)[w];
    }
    uint32_t x = 0; // the last, partial word: zero-padded (a bf16 count that is odd)
    for (size_t b = at; b < bytes; b++) {
        x |= (uint32_t)((const unsigned char*)buf)[b] << (8 * (b - at));
    }
    return x;
}

template <typename T>
__device__ __forceinline__ void store_word(void* buf, size_t w, size_t bytes, uint32_t x) {
    size_t at = w * 4;
    if (at + 4 <= bytes) {
        reinterpret_cast<uint32_t*>(buf)[w] = x;
        return;
    }
    for (size_t b = at; b < bytes; b++) {
        ((unsigned char*)buf)[b] = (unsigned char)(x >> (8 * (b - at)));
    }
}

template <typename T> __device__ __forceinline__ void unpack(uint32_t x, float (&v)[2]);
template <> __device__ __forceinline__ void unpack<float>(uint32_t x, float (&v)[2]) {
    v[0] = __uint_as_float(x);
}
template <> __device__ __forceinline__ void unpack<__nv_bfloat16>(uint32_t x, float (&v)[2]) {
    v[0] = __uint_as_float(x << 16);
    v[1] = __uint_as_float(x & 0xFFFF0000u);
}
template <typename T> __device__ __forceinline__ uint32_t pack(const float (&v)[2]);
template <> __device__ __forceinline__ uint32_t pack<float>(const float (&v)[2]) {
    return __float_as_uint(v[0]);
}
template <> __device__ __forceinline__ uint32_t pack<__nv_bfloat16>(const float (&v)[2]) {
    __nv_bfloat162 h = __floats2bfloat162_rn(v[0], v[1]);
    return *reinterpret_cast<uint32_t*>(&h);
}

template <typename T>
__device__ void one_shot_ll(void* buf, const Peers& ll, const Pads& pads, size_t count, int rank, int world, int divisor,
                            size_t slotWords) {
    size_t bytes = count * sizeof(T);
    size_t words = (bytes + 3) / 4;
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t epoch = next_epoch(pads, rank);
    size_t parity = epoch & 1u;
    using SysU64Ref = cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>;
    for (size_t w = first; w < words; w += threads) {
        unsigned long long word = ((unsigned long long)epoch << 32) | load_word<T>(buf, w, bytes);
#pragma unroll
        for (int p = 0; p < MAX_RANKS; p++) {
            if (p < world && p != rank) {
                unsigned long long* slot = (unsigned long long*)ll.ptr[p] + (parity * world + rank) * slotWords + w;
                SysU64Ref(*slot).store(word, cuda::memory_order_relaxed);
            }
        }
    }
    unsigned long long* mine = (unsigned long long*)ll.ptr[rank];
    for (size_t w = first; w < words; w += threads) {
        float acc[2] = {0.f, 0.f};
        for (int r = 0; r < world; r++) {
            uint32_t payload;
            if (r == rank) {
                payload = load_word<T>(buf, w, bytes);
            } else {
                SysU64Ref slot(mine[(parity * world + r) * slotWords + w]);
                unsigned long long v;
                do {
                    v = slot.load(cuda::memory_order_relaxed);
                } while ((uint32_t)(v >> 32) != epoch);
                payload = (uint32_t)v;
            }
            float x[2];
            unpack<T>(payload, x);
            if (r == 0) {
                acc[0] = x[0];
                acc[1] = x[1];
            } else {
                acc[0] += x[0];
                acc[1] += x[1];
            }
        }
        if (divisor > 0) {
            acc[0] = acc[0] / (float)divisor;
            acc[1] = acc[1] / (float)divisor;
        }
        store_word<T>(buf, w, bytes, pack<T>(acc));
    }
}

extern "C" __global__ void __launch_bounds__(512) symmem_one_shot_ll_f32(void* buf, const __grid_constant__ Peers ll, const __grid_constant__ Pads pads, size_t count,
        int rank, int world, int divisor, size_t slotWords) {
    follow_stream_order_release_next();
    one_shot_ll<float>(buf, ll, pads, count, rank, world, divisor, slotWords);
}
extern "C" __global__ void __launch_bounds__(512) symmem_one_shot_ll_bf16(void* buf, const __grid_constant__ Peers ll, const __grid_constant__ Pads pads, size_t count,
        int rank, int world, int divisor, size_t slotWords) {
    follow_stream_order_release_next();
    one_shot_ll<__nv_bfloat16>(buf, ll, pads, count, rank, world, divisor, slotWords);
}

// Both TWO_SHOT kernels: the elements past the last whole vector, from `from` to `count`, reduced by
// thread 0 of block 0 of the last rank (after a meeting, so every peer's input is in place) and
// written into every rank's buffer.
template <typename T>
__device__ __forceinline__ void two_shot_tail(const Peers& bufs, size_t count, size_t from, int rank, int world, int divisor) {
    if (rank == world - 1 && blockIdx.x == 0 && threadIdx.x == 0) {
        for (size_t i = from; i < count; i++) {
            float x = reduce_scalar<T>(bufs, world, i, divisor);
            for (int p = 0; p < world; p++) {
                Vec<T>::storeScalar(bufs.ptr[p], i, x);
            }
        }
    }
}

// ---- TWO_SHOT, in place: reduce-scatter, then all-gather by pushing ----
// Rank r reduces vectors of chunk r from every peer (rank order) and writes the result into
// chunk r of every rank's buffer. Nobody else reads or writes chunk r during the kernel, so the
// writes are safe after the first barrier; the second barrier tells every rank that all chunks
// pushed into its buffer have landed. The last rank also handles elements past the last vector.

template <typename T, int W>
__device__ void two_shot(const Peers& bufs, const Pads& pads, size_t count, int rank, int world, int divisor) {
    constexpr int N = Vec<T>::N;
    size_t nvec = count / N;
    size_t chunk = (nvec + world - 1) / world;
    size_t lo = min(nvec, (size_t)rank * chunk);
    size_t hi = min(nvec, lo + chunk);
    size_t threads = (size_t)gridDim.x * blockDim.x;
    barrier_blocks(pads, rank, world);
    // Two vectors per thread per iteration. Up to 4 ranks the loads of both (from every peer, over
    // NVLink) are issued before either is summed, so they are all in flight together; beyond, both
    // sets would take 64 registers and cut the blocks an SM holds, so the second set's loads follow
    // the first set's sum.
    size_t v = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; v + threads < hi; v += 2 * threads) {
        float a[8];
        float b[8];
        if constexpr (Ranks<W>::BOUND <= 4) {
            uint4 ra[Ranks<W>::BOUND];
            uint4 rb[Ranks<W>::BOUND];
            load_vectors<W>(bufs, world, v, ra);
            load_vectors<W>(bufs, world, v + threads, rb);
            sum_vectors<T, W>(ra, world, divisor, a);
            sum_vectors<T, W>(rb, world, divisor, b);
        } else {
            reduce_vector<T, W>(bufs, world, v, divisor, a);
            reduce_vector<T, W>(bufs, world, v + threads, divisor, b);
        }
#pragma unroll
        for (int p = 0; p < Ranks<W>::BOUND; p++) {
            if (Ranks<W>::has(p, world)) {
                Vec<T>::store(bufs.ptr[p], v, a);
                Vec<T>::store(bufs.ptr[p], v + threads, b);
            }
        }
    }
    if (v < hi) {
        float a[8];
        reduce_vector<T, W>(bufs, world, v, divisor, a);
#pragma unroll
        for (int p = 0; p < Ranks<W>::BOUND; p++) {
            if (Ranks<W>::has(p, world)) {
                Vec<T>::store(bufs.ptr[p], v, a);
            }
        }
    }
    two_shot_tail<T>(bufs, count, nvec * N, rank, world, divisor);
    barrier_blocks(pads, rank, world);
}

// The common rank counts get code with the rank loops unrolled to exactly their ranks.
template <typename T>
__device__ void two_shot_any(const Peers& bufs, const Pads& pads, size_t count, int rank, int world, int divisor) {
    switch (world) {
        case 2: two_shot<T, 2>(bufs, pads, count, rank, world, divisor); break;
        case 4: two_shot<T, 4>(bufs, pads, count, rank, world, divisor); break;
        case 8: two_shot<T, 8>(bufs, pads, count, rank, world, divisor); break;
        default: two_shot<T, 0>(bufs, pads, count, rank, world, divisor); break;
    }
}

extern "C" __global__ void __launch_bounds__(512) symmem_two_shot_f32(const __grid_constant__ Peers bufs, const __grid_constant__ Pads pads, size_t count, int rank, int world, int divisor) {
    follow_stream_order_release_next();
    two_shot_any<float>(bufs, pads, count, rank, world, divisor);
}
extern "C" __global__ void __launch_bounds__(512) symmem_two_shot_bf16(const __grid_constant__ Peers bufs, const __grid_constant__ Pads pads, size_t count, int rank, int world, int divisor) {
    follow_stream_order_release_next();
    two_shot_any<__nv_bfloat16>(bufs, pads, count, rank, world, divisor);
}

// ---- TWO_SHOT by writes only, through a scratch: for large messages ----
// Over NVLink a store is a posted write while a load is a request and a response, and the
// measured ceilings differ (2 x H200, 256 MiB each way at once: SM stores 364 GB/s per direction,
// SM loads 335, bench/results/2026-11-22-nvlink-patterns-2xh200.md). The kernel above pulls the
// peers' chunks with loads; this one moves every byte over NVLink as a store. The message goes in
// rounds of world x slotVecs vectors; round k splits into `world` chunks of `len` vectors and
// rank r owns chunk r:
//   1. rank r stores its copy of chunk p into slot r of peer p's scratch (parity k & 1);
//   2. block b meets block b of every peer (the slots it reads next have landed);
//   3. rank r reduces chunk r — its own copy and the peers' copies from its scratch, in rank
//      order — and stores the result into chunk r of every rank's buffer.
// A final meeting tells every rank that all chunks pushed into its buffer have landed.
// Why it is safe without an entry barrier: no rank ever reads a peer's memory, and a rank writes
// into a peer's buffer only chunk positions it owns, after the round's meeting, by which the peer
// has read its own copy of them (step 1 precedes the peer's arrival). A scratch slot of parity P
// is written again two rounds later, after a meeting the peer reaches only once it has read the
// slot; across calls, the final meeting orders every read of the last call before any write of
// the next, whatever the grids. The block b of every rank touches the same slot positions, so
// block-level meetings suffice. Elements past the last whole vector: rank world-1's thread 0
// (after the first meeting, so every peer's input is in place).

template <typename T>
__device__ void two_shot_push(const Peers& bufs, const Peers& scratch, const Pads& pads, size_t count, int rank, int world,
                              int divisor, size_t slotBytes) {
    constexpr int N = Vec<T>::N;
    size_t nvec = count / N;
    size_t slotVecs = slotBytes / 16;
    size_t perRound = (size_t)world * slotVecs;
    size_t rounds = nvec == 0 ? 1 : (nvec + perRound - 1) / perRound;
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t epoch = claim_epochs(pads, rank, (uint32_t)rounds + 1);
    const uint4* mine = reinterpret_cast<const uint4*>(bufs.ptr[rank]);
    for (size_t k = 0; k < rounds; k++) {
        size_t base = k * perRound;
        size_t rem = nvec - min(nvec, base);
        size_t len = min(slotVecs, (rem + world - 1) / world);
        size_t parityBase = (k & 1) * world;
        for (size_t v = tid; v < len; v += threads) {
#pragma unroll
            for (int p = 0; p < MAX_RANKS; p++) {
                size_t from = base + p * len + v;
                if (p < world && p != rank && from < nvec) {
                    reinterpret_cast<uint4*>(scratch.ptr[p])[(parityBase + rank) * slotVecs + v] = mine[from];
                }
            }
        }
        meet(pads, rank, world, epoch + (uint32_t)k);
        size_t lo = base + rank * len;
        size_t hi = min(nvec, lo + len);
        // The rank-order sum is written out rather than through reduce_vector over a Peers table of
        // this round's sources: that table costs 8 more pointer registers (64 per thread for bf16
        // instead of 32, halving its resident blocks) and spills on sm_90 (f32) and sm_100 (bf16).
        for (size_t v = lo + tid; v < hi; v += threads) {
            float acc[8];
#pragma unroll
            for (int q = 0; q < MAX_RANKS; q++) {
                if (q < world) {
                    float x[8];
                    if (q == rank) {
                        Vec<T>::load(mine, v, x);
                    } else {
                        Vec<T>::load(scratch.ptr[rank], (parityBase + q) * slotVecs + (v - lo), x);
                    }
#pragma unroll
                    for (int e = 0; e < N; e++) {
                        acc[e] = q == 0 ? x[e] : acc[e] + x[e];
                    }
                }
            }
            if (divisor > 0) {
#pragma unroll
                for (int e = 0; e < N; e++) {
                    acc[e] = acc[e] / (float)divisor;
                }
            }
#pragma unroll
            for (int p = 0; p < MAX_RANKS; p++) {
                if (p < world) {
                    Vec<T>::store(bufs.ptr[p], v, acc);
                }
            }
        }
    }
    two_shot_tail<T>(bufs, count, nvec * N, rank, world, divisor);
    meet(pads, rank, world, epoch + (uint32_t)rounds);
}

// (512, 2): at most 64 registers, so sm_80's compiler keeps the f32 kernel out of local memory (it
// also lets bf16 use 56 registers on sm_90, 2 blocks per SM instead of 4; measured about 1 % slower at
// 64 and 256 MiB on 2 x H200, bench/results/2026-11-22-nvlink-patterns-2xh200.md part 2, "2x" vs "4x")
extern "C" __global__ void __launch_bounds__(512, 2) symmem_two_shot_push_f32(const __grid_constant__ Peers bufs, const __grid_constant__ Peers scratch,
        const __grid_constant__ Pads pads, size_t count, int rank, int world, int divisor, size_t slotBytes) {
    follow_stream_order_release_next();
    two_shot_push<float>(bufs, scratch, pads, count, rank, world, divisor, slotBytes);
}
extern "C" __global__ void __launch_bounds__(512, 2) symmem_two_shot_push_bf16(const __grid_constant__ Peers bufs, const __grid_constant__ Peers scratch,
        const __grid_constant__ Pads pads, size_t count, int rank, int world, int divisor, size_t slotBytes) {
    follow_stream_order_release_next();
    two_shot_push<__nv_bfloat16>(bufs, scratch, pads, count, rank, world, divisor, slotBytes);
}

// ---- reduce-scatter: symmetric input of `world` blocks of `count` elements; block `rank`
// reduced over ranks lands in `out` (any device pointer of this rank). Second barrier: peers may
// overwrite their input only after every rank has read it.

template <typename T>
__device__ void reduce_scatter(const Peers& bufs, const Pads& pads, void* out, size_t count, int rank, int world) {
    constexpr int N = Vec<T>::N;
    size_t blockBytes = count * sizeof(T);
    Peers mine; // built with constant indices only, so it stays in registers
#pragma unroll
    for (int p = 0; p < MAX_RANKS; p++) {
        mine.ptr[p] = p < world ? (char*)bufs.ptr[p] + (size_t)rank * blockBytes : nullptr;
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

extern "C" __global__ void __launch_bounds__(512) symmem_reduce_scatter_f32(const __grid_constant__ Peers bufs, const __grid_constant__ Pads pads, void* out, size_t count, int rank, int world) {
    follow_stream_order_release_next();
    reduce_scatter<float>(bufs, pads, out, count, rank, world);
}
extern "C" __global__ void __launch_bounds__(512) symmem_reduce_scatter_bf16(const __grid_constant__ Peers bufs, const __grid_constant__ Pads pads, void* out, size_t count, int rank, int world) {
    follow_stream_order_release_next();
    reduce_scatter<__nv_bfloat16>(bufs, pads, out, count, rank, world);
}

// ---- all-gather: `in` (this rank's `bytes`) is pushed into block `rank` of every rank's symmetric
// output. First barrier: every rank's output is free (its last readers are done); second: all
// blocks have landed everywhere.

extern "C" __global__ void __launch_bounds__(512) symmem_all_gather(const __grid_constant__ Peers outs, const __grid_constant__ Pads pads, const void* in, size_t bytes, int rank, int world) {
    follow_stream_order_release_next();
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
    follow_stream_order_release_next();
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

// ---- copy by loads and stores (a peer's shard read zero-copy) ----
// Every thread of the grid copies 16-byte vectors from `src` to `dst`, grid-strided, with the bytes
// the vectors leave (an unaligned or odd-sized range) copied byte by byte. Either side may be a peer's
// buffer mapped on this GPU: reading a peer's memory this way is the kernel's own loads over NVLink,
// not the copy engine. Waits for nobody; stream order alone orders it with the work around it.
extern "C" __global__ void __launch_bounds__(512) symmem_copy(void* dst, const void* src, size_t bytes) {
    follow_stream_order_release_next();
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    bool vector = ((uintptr_t)src % 16) == 0 && ((uintptr_t)dst % 16) == 0;
    size_t vecs = vector ? bytes / 16 : 0;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    // four independent loads in flight per thread before their stores: a remote read's latency is long
    size_t v = tid;
    for (; v + 3 * threads < vecs; v += 4 * threads) {
        uint4 a = s[v];
        uint4 b = s[v + threads];
        uint4 c = s[v + 2 * threads];
        uint4 e = s[v + 3 * threads];
        d[v] = a;
        d[v + threads] = b;
        d[v + 2 * threads] = c;
        d[v + 3 * threads] = e;
    }
    for (; v < vecs; v += threads) {
        d[v] = s[v];
    }
    for (size_t i = vecs * 16 + tid; i < bytes; i += threads) {
        ((char*)dst)[i] = ((const char*)src)[i];
    }
}

extern "C" __global__ void symmem_wait_signal(unsigned long long* signal, unsigned long long value) {
    follow_stream_order_release_next();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        SysU64 s(*signal);
        // acquire: pairs with the putter's release; its data is visible to this stream's later work
        while (s.load(cuda::memory_order_acquire) < value) {
        }
    }
}

// Waits until the slot holds at least `value`, then takes `value` off it: the slot is a counting
// semaphore (puts add, waits consume), so the same pair of launches works again and again, as a
// CUDA graph replays them, without the thresholds growing. The put that refills the slot is only
// issued after this wait in the protocols that use it (a ping-pong, a stage hand-off whose slot the
// consumer frees), so nothing is lost between the load and the subtraction.
extern "C" __global__ void symmem_wait_signal_consume(unsigned long long* signal, unsigned long long value) {
    follow_stream_order_release_next();
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        SysU64 s(*signal);
        // acquire: pairs with the putter's release; its data is visible to this stream's later work
        while (s.load(cuda::memory_order_acquire) < value) {
        }
        // relaxed: the acquire above already ordered the data; the subtraction only resets the count
        s.fetch_sub(value, cuda::memory_order_relaxed);
    }
}

// ---- Tensor-parallel GEMMs' local steps (parallel/…/cuda/CudaTensorParallelGemm.java) ----
// None of these waits for a peer: the GEMMs' chunks arrive through the copy engine and the signal
// kernels above; these only sum what has arrived and apply the MLP block's activation.

// out[i] = sum over s = 0..slots-1, in that order, of in[s * count + i], accumulated in float and
// rounded once: the last step of the fused matmul + reduce-scatter, where slot s holds rank s's
// partial product of this rank's rows. Every rank sums its own rows in rank order, so the result does
// not depend on which peer's chunk landed first.
template <typename T>
__device__ __forceinline__ void sum_slots(const void* in, void* out, size_t count, int slots) {
    follow_stream_order_release_next();
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    constexpr int N = Vec<T>::N;
    bool vector = count % N == 0 && ((uintptr_t)in % 16) == 0 && ((uintptr_t)out % 16) == 0;
    size_t vecs = vector ? count / N : 0;
    size_t slotBytes = count * sizeof(T);
    for (size_t v = tid; v < vecs; v += threads) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int s = 0; s < slots; s++) {
            float x[8];
            Vec<T>::load((const char*)in + s * slotBytes, v, x);
#pragma unroll
            for (int k = 0; k < N; k++) {
                acc[k] += x[k];
            }
        }
        Vec<T>::store(out, v, acc);
    }
    for (size_t i = vecs * N + tid; i < count; i += threads) {
        float acc = 0;
        for (int s = 0; s < slots; s++) {
            acc += Vec<T>::loadScalar((const char*)in + s * slotBytes, i);
        }
        Vec<T>::storeScalar(out, i, acc);
    }
}

extern "C" __global__ void __launch_bounds__(512) symmem_sum_slots_f32(const void* in, void* out, size_t count, int slots) {
    sum_slots<float>(in, out, count, slots);
}

extern "C" __global__ void __launch_bounds__(512) symmem_sum_slots_bf16(const void* in, void* out, size_t count, int slots) {
    sum_slots<__nv_bfloat16>(in, out, count, slots);
}

// out[i] = max(in[i], 0) (in place when out == in).
template <typename T>
__device__ __forceinline__ void relu(const void* in, void* out, size_t count) {
    follow_stream_order_release_next();
    size_t threads = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += threads) {
        float x = Vec<T>::loadScalar(in, i);
        Vec<T>::storeScalar(out, i, x > 0.0f ? x : 0.0f);
    }
}

extern "C" __global__ void __launch_bounds__(512) symmem_relu_f32(const void* in, void* out, size_t count) {
    relu<float>(in, out, count);
}

extern "C" __global__ void __launch_bounds__(512) symmem_relu_bf16(const void* in, void* out, size_t count) {
    relu<__nv_bfloat16>(in, out, count);
}

// out[i] = pre[i] > 0 ? grad[i] : 0: the activation's backward, from its input (in place when out == grad).
template <typename T>
__device__ __forceinline__ void relu_backward(const void* grad, const void* pre, void* out, size_t count) {
    follow_stream_order_release_next();
    size_t threads = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += threads) {
        float g = Vec<T>::loadScalar(grad, i);
        Vec<T>::storeScalar(out, i, Vec<T>::loadScalar(pre, i) > 0.0f ? g : 0.0f);
    }
}

extern "C" __global__ void __launch_bounds__(512) symmem_relu_backward_f32(const void* grad, const void* pre, void* out, size_t count) {
    relu_backward<float>(grad, pre, out, count);
}

extern "C" __global__ void __launch_bounds__(512) symmem_relu_backward_bf16(const void* grad, const void* pre, void* out, size_t count) {
    relu_backward<__nv_bfloat16>(grad, pre, out, count);
}

// out[i] = in[i] rounded to bfloat16 (round to nearest even, as torch's .to(torch.bfloat16)): a float32 master
// shard cast into the block a fully sharded step all-gathers (FullyShardedMlp). Waits for nobody.
extern "C" __global__ void __launch_bounds__(512) symmem_cast_f32_bf16(const float* in, __nv_bfloat16* out, size_t count) {
    follow_stream_order_release_next();
    size_t threads = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += threads) {
        out[i] = __float2bfloat16_rn(in[i]);
    }
}

// One Adam step on count float32 parameters, in torch.optim.Adam's arithmetic (no weight decay, no amsgrad):
//   g = gradScale * grad[i] (bfloat16 gradient, e.g. a reduce-scattered sum, scaled by 1/world for the mean)
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
//   param -= stepSize * m / (sqrt(v) / sqrtBias2 + eps),  stepSize = lr / (1 - beta1^t), sqrtBias2 = sqrt(1 - beta2^t)
// (the bias corrections are computed on the host in double, as torch computes them in Python floats). When out is not
// null it receives the updated parameters rounded to bfloat16 (a replica's compute copy). Waits for nobody.
extern "C" __global__ void __launch_bounds__(512) symmem_adam_bf16(float* param, float* m, float* v, const __nv_bfloat16* grad,
        __nv_bfloat16* out, size_t count, float gradScale, float beta1, float beta2, float stepSize, float sqrtBias2, float eps) {
    follow_stream_order_release_next();
    size_t threads = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += threads) {
        float g = __bfloat162float(grad[i]) * gradScale;
        float mi = m[i];
        mi = mi + (1.0f - beta1) * (g - mi);
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        float p = param[i] - stepSize * (mi / (sqrtf(vi) / sqrtBias2 + eps));
        m[i] = mi;
        v[i] = vi;
        param[i] = p;
        if (out != nullptr) {
            out[i] = __float2bfloat16_rn(p);
        }
    }
}

// ---- ring buffer append, on the producer's stream (org.symmem4j.state.DeviceRingBuffer) ----
// The ring lives in the consumer's buffer (mapped on this GPU), laid out as RingBufferLayout /
// DeviceRingLayout say: TAIL at RING_TAIL, HEAD at RING_HEAD, the records from RING_DATA; a record is
// one 64-bit header word (low 32 bits: header + payload bytes, high 32 bits: the message type, or
// RING_PADDING for a filler up to the ring's end) and the payload, 8-byte aligned. A header word reads
// 0 until its record is published: the consumer zeroes the records it read before it moves HEAD.
//
// One block. Thread 0 claims room: it waits (bounded by `wait_ns` of the GPU's global timer) until
// HEAD leaves room, then takes it (one-to-one: the one producer stores TAIL; many-to-one: atomicCAS
// at system scope on TAIL, retried on a lost race). Every thread copies the payload, then fences at
// system scope, and thread 0 publishes the record with one release store of the header word (and,
// after it, the padding's header, so a consumer that skips the padding finds the record published).
// A claim that times out writes nothing into the ring; it counts itself in `*status` (this rank's own
// word), and every later append on this stream with a non-zero status drops its message the same
// way, so the consumer never sees a later message without an earlier one. The host reads the count
// after a synchronize and raises the timeout naming the consumer. A claim that waits for room also
// stops, the same way, once the consumer's CLOSED word (its status line, RING_CLOSED bytes in: after
// the data ring, DeviceRingLayout) reads non-zero: a consumer that began closing will free no room.
#define RING_TAIL 128
#define RING_HEAD 256
#define RING_DATA 384
#define RING_PADDING 0xFFFFFFFFu
#define RING_CLOSED 8

extern "C" __global__ void __launch_bounds__(32) symmem_ring_put(unsigned char* ring, const unsigned char* src,
        unsigned int length, unsigned int type, unsigned int capacity, int many, unsigned long long wait_ns,
        unsigned long long* status) {
    follow_stream_order_release_next();
    __shared__ unsigned long long claimed;   // where the record starts (a position, not yet masked)
    __shared__ long long padding;            // where the padding starts, -1 for none
    __shared__ int ok;
    unsigned long long mask = capacity - 1;
    unsigned long long record = ((unsigned long long)length + 8 + 7) & ~7ull;
    if (threadIdx.x == 0) {
        ok = 0;
        SysU64 st(*status);
        // relaxed: only this stream writes the word, and its kernels run in order
        if (st.load(cuda::memory_order_relaxed) != 0) {
            st.fetch_add(1ull, cuda::memory_order_relaxed);
        } else {
            SysU64 tail_word(*reinterpret_cast<unsigned long long*>(ring + RING_TAIL));
            SysU64 head_word(*reinterpret_cast<unsigned long long*>(ring + RING_HEAD));
            unsigned long long start = 0;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
            for (;;) {
                unsigned long long tail = tail_word.load(cuda::memory_order_relaxed);
                // acquire at system scope: pairs with the consumer's release of HEAD (host copies in
                // order: the zeroing of the records it read, then HEAD), so the room taken below reads 0
                unsigned long long head = head_word.load(cuda::memory_order_acquire);
                unsigned long long index = tail & mask;
                unsigned long long to_end = capacity - index;
                unsigned long long pad = to_end < record ? to_end : 0;
                if (tail + pad + record - head <= capacity) {
                    bool won = true;
                    if (many) {
                        // system-scope CAS: producers on this and other GPUs race for the same TAIL
                        unsigned long long expected = tail;
                        won = tail_word.compare_exchange_strong(expected, tail + pad + record,
                                cuda::memory_order_relaxed);
                    } else {
                        // relaxed: the one producer alone writes TAIL; the consumer never reads it
                        tail_word.store(tail + pad + record, cuda::memory_order_relaxed);
                    }
                    if (won) {
                        claimed = tail + pad;
                        padding = pad != 0 ? (long long)tail : -1;
                        ok = 1;
                        break;
                    }
                    continue;
                }
                unsigned long long now = 0;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
                // relaxed: the word only goes from 0 to 1, and a 1 only ends this wait (nothing read after it)
                SysU64 consumer_closed(*reinterpret_cast<unsigned long long*>(ring + RING_DATA + capacity
                        + RING_CLOSED));
                if (now - start >= wait_ns || consumer_closed.load(cuda::memory_order_relaxed) != 0) {
                    st.fetch_add(1ull, cuda::memory_order_relaxed);
                    break;
                }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
                __nanosleep(256);
#endif
            }
        }
    }
    __syncthreads();
    if (!ok) {
        return;
    }
    unsigned char* data = ring + RING_DATA;
    unsigned long long at = claimed & mask;
    unsigned char* dst = data + at + 8;
    for (unsigned int i = threadIdx.x; i < length; i += blockDim.x) {
        dst[i] = src[i];
    }
    // release, part 1: every thread's payload stores are performed at system scope before the barrier,
    // so thread 0's header store below cannot be seen before them (by the consumer's host copies or by
    // a peer GPU)
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long header = ((unsigned long long)type << 32) | (unsigned long long)(length + 8);
        SysU64 h(*reinterpret_cast<unsigned long long*>(data + at));
        // release, part 2: the record's header word, published once; pairs with the consumer's read of it
        h.store(header, cuda::memory_order_release);
        if (padding >= 0) {
            unsigned long long p = (unsigned long long)padding & mask;
            SysU64 ph(*reinterpret_cast<unsigned long long*>(data + p));
            // release after the record's: a consumer that skips the padding finds the record published
            ph.store(((unsigned long long)RING_PADDING << 32) | (capacity - p), cuda::memory_order_release);
        }
    }
}

// ---- hash map operations, on the caller's stream (org.symmem4j.state.DeviceHashMap) ----
// The owner's partition (mapped on this GPU) is laid out as HashMapLayout says: the header (key bytes,
// value bytes and slots read from it here), then slots of one 64-bit word (bits 0-2 the state, 3-23 the
// writer's rank while LOCKED, 24-63 the version, +1 at every unlock), the key hash, the key and the
// value (each padded to 8 bytes). The key and the value come in the launch's parameters (`in`: key
// words, then value words, zero-padded); the result goes to this rank's own `out`: out[0] the code,
// out[1] the slot's offset, out[2] the word (LOCKED by this rank after MAP_OP_LOCK; the holder's word
// after MAP_BUSY), out[3] the state before, and the value from MAP_OUT_VALUE bytes on.
//
// One block. Thread 0 probes (linearly from the hash) and takes the slot with one system-scope CAS of
// its word; every thread copies words; the writer fences at system scope and thread 0 unlocks with one
// release store of the next version. A reader (MAP_OP_GET) copies the value between an acquire read of
// the word and a second read after a system fence, and starts over when they differ (seqlock): it never
// returns a torn value. A LOCKED slot is waited for at most `wait_ns` (the GPU's global timer), then the
// kernel answers MAP_BUSY with the holder's word and writes nothing: the host checks the holder is alive
// (else it retires the slot with MAP_OP_RETIRE: LOCKED -> DEAD by CAS, never readable as valid) and
// launches again, bounded by the group's timeout. MAP_OP_LOCK and MAP_OP_UNLOCK are the two halves of a
// host-driven compute: the slot stays LOCKED by this rank while the host applies its function.
#define MAP_KEY_BYTES 8
#define MAP_VALUE_BYTES 12
#define MAP_SLOTS 16
#define MAP_HEADER 128
#define MAP_SLOT_HASH 8
#define MAP_SLOT_KEY 16
#define MAP_INLINE_BYTES 2048
#define MAP_OUT_VALUE 64
#define MAP_EMPTY 0
#define MAP_FULL 1
#define MAP_REMOVED 2
#define MAP_LOCKED 3
#define MAP_DEAD 4
#define MAP_OP_GET 1
#define MAP_OP_PUT 2
#define MAP_OP_PUT_IF_ABSENT 3
#define MAP_OP_REMOVE 4
#define MAP_OP_LOCK 5
#define MAP_OP_UNLOCK 6
#define MAP_OP_RETIRE 7
#define MAP_UNLOCK_WRITE 256
#define MAP_ABSENT 1
#define MAP_PRESENT 2
#define MAP_BUSY 3
#define MAP_NO_SLOT 4

#define MAP_ACT_DONE 0
#define MAP_ACT_READ 1
#define MAP_ACT_WRITE 2
#define MAP_ACT_RETRY 3

struct MapInline {
    unsigned long long w[MAP_INLINE_BYTES / 8];
};

__device__ __forceinline__ unsigned long long map_word(unsigned long long state, unsigned long long rank,
        unsigned long long version) {
    return (version << 24) | (rank << 3) | state;
}

__device__ __forceinline__ unsigned long long map_now() {
    unsigned long long t = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Thread 0: finds the key's slot (or the first never-used slot of its probe) and does what it can alone.
// Returns what every thread does next; sets *off, *word (the word read, or the LOCKED word set) and *before.
__device__ int map_find(unsigned char* part, unsigned long long* out, const MapInline& in, unsigned long long hash,
        int op, int rank, unsigned int key_words, unsigned long long slot_bytes, unsigned int slots,
        unsigned long long wait_ns, unsigned long long* off_out, unsigned long long* word_out, int* before_out) {
    unsigned long long start_time = map_now();
    unsigned int start = (unsigned int)hash & (slots - 1);
    for (unsigned int i = 0; i < slots; i++) {
        unsigned long long off = MAP_HEADER + (unsigned long long)((start + i) & (slots - 1)) * slot_bytes;
        SysU64 w(*reinterpret_cast<unsigned long long*>(part + off));
        for (;;) {
            // acquire at system scope: pairs with the release store that unlocked the slot (this or another
            // GPU's kernel); the key and value written under that lock are seen after it
            unsigned long long word = w.load(cuda::memory_order_acquire);
            int st = (int)(word & 7);
            if (st == MAP_LOCKED) {
                if (map_now() - start_time >= wait_ns) {
                    out[0] = MAP_BUSY;
                    out[1] = off;
                    out[2] = word;
                    return MAP_ACT_DONE;
                }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
                __nanosleep(256);
#endif
                continue;
            }
            if (st == MAP_EMPTY) {
                if (op == MAP_OP_GET || op == MAP_OP_REMOVE) {
                    out[0] = MAP_ABSENT; // a never-used slot ends the probe: the key is nowhere
                    return MAP_ACT_DONE;
                }
            } else {
                // FULL or REMOVED: the key was published before the word just acquired and never changes
                bool match = st != MAP_DEAD
                        && *reinterpret_cast<volatile unsigned long long*>(part + off + MAP_SLOT_HASH) == hash;
                for (unsigned int k = 0; match && k < key_words; k++) {
                    match = reinterpret_cast<volatile unsigned long long*>(part + off + MAP_SLOT_KEY)[k] == in.w[k];
                }
                if (!match) {
                    break; // another key's slot, or a retired one: probe on
                }
            }
            *off_out = off;
            *before_out = st;
            if (op == MAP_OP_GET) {
                if (st != MAP_FULL) {
                    out[0] = MAP_ABSENT; // the key's own slot, removed: it is nowhere else
                    return MAP_ACT_DONE;
                }
                *word_out = word;
                return MAP_ACT_READ;
            }
            if (op == MAP_OP_REMOVE) {
                if (st != MAP_FULL) {
                    out[0] = MAP_ABSENT;
                    return MAP_ACT_DONE;
                }
                unsigned long long expected = word;
                // CAS at system scope, release: FULL -> REMOVED with the next version, in one step (nothing
                // is written under a lock); readers that copied the value re-read the word and retry
                if (w.compare_exchange_strong(expected, map_word(MAP_REMOVED, 0, (word >> 24) + 1),
                        cuda::memory_order_acq_rel)) {
                    out[0] = MAP_PRESENT;
                    return MAP_ACT_DONE;
                }
                continue;
            }
            if (op == MAP_OP_PUT_IF_ABSENT && st == MAP_FULL) {
                out[0] = MAP_PRESENT; // present at the acquire above: nothing to write
                return MAP_ACT_DONE;
            }
            unsigned long long locked = map_word(MAP_LOCKED, (unsigned long long)rank, word >> 24);
            unsigned long long expected = word;
            // CAS at system scope: the linearization point of the write; fails when the slot changed since
            // the read (another rank's writer, on this GPU or another)
            if (!w.compare_exchange_strong(expected, locked, cuda::memory_order_acq_rel)) {
                continue;
            }
            // the LOCKED word is performed at system scope before any thread's slot stores (after the
            // barrier that follows): a reader that sees one of them re-reads the word as changed
            __threadfence_system();
            *word_out = locked;
            if (op == MAP_OP_LOCK) {
                out[0] = st == MAP_FULL ? MAP_PRESENT : MAP_ABSENT;
                out[1] = off;
                out[2] = locked;
                out[3] = (unsigned long long)st;
                return st == MAP_FULL ? MAP_ACT_READ : MAP_ACT_DONE;
            }
            return MAP_ACT_WRITE; // PUT, PUT_IF_ABSENT
        }
    }
    out[0] = (op == MAP_OP_GET || op == MAP_OP_REMOVE) ? MAP_ABSENT : MAP_NO_SLOT;
    return MAP_ACT_DONE;
}

extern "C" __global__ void __launch_bounds__(32) symmem_map_op(unsigned char* part, unsigned long long* out,
        MapInline in, unsigned long long hash, int op, int rank, unsigned long long slot_off,
        unsigned long long seen, int state, unsigned long long wait_ns) {
    follow_stream_order_release_next();
    __shared__ unsigned long long s_off;
    __shared__ unsigned long long s_word;
    __shared__ int s_before;
    __shared__ int s_action;
    // the header, written once by the owner before the barrier that ended the map's creation
    unsigned int key_bytes = *reinterpret_cast<volatile unsigned int*>(part + MAP_KEY_BYTES);
    unsigned int value_bytes = *reinterpret_cast<volatile unsigned int*>(part + MAP_VALUE_BYTES);
    unsigned int slots = *reinterpret_cast<volatile unsigned int*>(part + MAP_SLOTS);
    unsigned int key_words = (key_bytes + 7) / 8;
    unsigned int value_words = (value_bytes + 7) / 8;
    unsigned long long slot_bytes = MAP_SLOT_KEY + 8ull * (key_words + value_words);
    unsigned int value_at = MAP_SLOT_KEY + 8 * key_words;
    volatile unsigned long long* out_value = reinterpret_cast<volatile unsigned long long*>(
            reinterpret_cast<unsigned char*>(out) + MAP_OUT_VALUE);

    if (op == MAP_OP_RETIRE) {
        if (threadIdx.x == 0) {
            SysU64 w(*reinterpret_cast<unsigned long long*>(part + slot_off));
            unsigned long long expected = seen;
            // CAS at system scope: the holder of `seen` is dead and writes no more; retiring happens once
            bool won = w.compare_exchange_strong(expected, map_word(MAP_DEAD, 0, (seen >> 24) + 1),
                    cuda::memory_order_acq_rel);
            out[0] = won ? MAP_PRESENT : MAP_ABSENT;
        }
        return;
    }
    if (op == MAP_OP_UNLOCK) {
        // the slot is this rank's (LOCKED by its MAP_OP_LOCK as `seen`): write the entry when asked
        // (MAP_UNLOCK_WRITE: the function kept a value), then leave the state given
        unsigned long long* slot = reinterpret_cast<unsigned long long*>(part + slot_off);
        bool write = (state & MAP_UNLOCK_WRITE) != 0;
        state &= MAP_UNLOCK_WRITE - 1;
        if (write) {
            if (threadIdx.x == 0) {
                slot[MAP_SLOT_HASH / 8] = hash;
            }
            for (unsigned int k = threadIdx.x; k < key_words; k += blockDim.x) {
                slot[MAP_SLOT_KEY / 8 + k] = in.w[k];
            }
            for (unsigned int k = threadIdx.x; k < value_words; k += blockDim.x) {
                slot[value_at / 8 + k] = in.w[key_words + k];
            }
        }
        // release, part 1: every thread's stores are performed at system scope before the barrier
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            // release, part 2: the unlock with the next version; pairs with readers' and writers' acquire
            SysU64(*slot).store(map_word((unsigned long long)state, 0, (seen >> 24) + 1), cuda::memory_order_release);
            out[0] = MAP_PRESENT;
        }
        return;
    }
    for (;;) {
        if (threadIdx.x == 0) {
            s_action = map_find(part, out, in, hash, op, rank, key_words, slot_bytes, slots, wait_ns, &s_off, &s_word,
                    &s_before);
        }
        __syncthreads();
        int action = s_action;
        if (action == MAP_ACT_DONE) {
            return;
        }
        const unsigned char* slot = part + s_off;
        if (action == MAP_ACT_WRITE) {
            unsigned long long* w = reinterpret_cast<unsigned long long*>(part + s_off);
            if (s_before == MAP_EMPTY) {
                if (threadIdx.x == 0) {
                    w[MAP_SLOT_HASH / 8] = hash;
                }
                for (unsigned int k = threadIdx.x; k < key_words; k += blockDim.x) {
                    w[MAP_SLOT_KEY / 8 + k] = in.w[k];
                }
            }
            for (unsigned int k = threadIdx.x; k < value_words; k += blockDim.x) {
                w[value_at / 8 + k] = in.w[key_words + k];
            }
            // release, part 1: every thread's slot stores are performed at system scope before the barrier
            __threadfence_system();
            __syncthreads();
            if (threadIdx.x == 0) {
                // release, part 2: FULL with the next version; pairs with the acquire of readers and writers
                SysU64(*w).store(map_word(MAP_FULL, 0, (s_word >> 24) + 1), cuda::memory_order_release);
                out[0] = s_before == MAP_FULL ? MAP_PRESENT : MAP_ABSENT;
            }
            return;
        }
        // MAP_ACT_READ: copy the value out (GET between two reads of the word; LOCK under this rank's lock)
        const volatile unsigned long long* value = reinterpret_cast<const volatile unsigned long long*>(slot + value_at);
        for (unsigned int k = threadIdx.x; k < value_words; k += blockDim.x) {
            out_value[k] = value[k];
        }
        // acquire side of the seqlock: every thread's value loads complete before thread 0 reads the word again
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            if (op == MAP_OP_GET) {
                unsigned long long again = SysU64(*reinterpret_cast<unsigned long long*>(part + s_off))
                        .load(cuda::memory_order_relaxed);
                if (again == s_word) {
                    out[0] = MAP_PRESENT;
                    s_action = MAP_ACT_DONE;
                } else {
                    s_action = MAP_ACT_RETRY; // a writer came in between: the copy may be torn, take it again
                }
            } else {
                s_action = MAP_ACT_DONE;
            }
        }
        __syncthreads();
        if (s_action == MAP_ACT_DONE) {
            return;
        }
        __syncthreads(); // every thread has read s_action before thread 0 sets it again
    }
}
