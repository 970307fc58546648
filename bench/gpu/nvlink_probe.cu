// NVLink transfer-pattern probe for 2 GPUs: what bandwidth each way of moving bytes between two
// peers reaches, so the large-message all-reduce kernels are designed against measured ceilings
// rather than guesses. Standalone (CUDA runtime, statically linked), one process driving both GPUs.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -o nvlink_probe bench/gpu/nvlink_probe.cu && [PATTERNS=1] ./nvlink_probe
// (bench/gpu/pack.sh builds it into .device/; bench/gpu/run-on-device.sh nvlink runs it there)
//
// With PATTERNS=1, each at 64 MiB and 256 MiB per GPU, median of 7 timings of a batch:
//   copy engine one way / both ways (cudaMemcpyPeerAsync)
//   SM push both ways (each GPU stores its buffer into the peer's), SM pull both ways (loads)
//   all-reduce variants (bf16, in place), over several grid sizes: TWO_SHOT's pulling kernel
//   (symmem_two_shot_*: loads of the peer's half, stores of the result), a write-only design and a
//   pull-only design, each with a scratch as large as the message (PATTERNS=1, as for the above);
//   then, always, the pulling kernel against the shipped write-only kernel (symmem_two_shot_push_*)
//   with its bounded scratch at several slot sizes, 256 KiB to 256 MiB.
#include "probe_common.h"
#include "../../kernels/src/main/cuda/symmem4j_kernels.cu"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>


__global__ void copy_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n) {
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * threads < n; i += 4 * threads) {
        uint4 a = src[i], b = src[i + threads], c = src[i + 2 * threads], d = src[i + 3 * threads];
        dst[i] = a; dst[i + threads] = b; dst[i + 2 * threads] = c; dst[i + 3 * threads] = d;
    }
    for (; i < n; i += threads) dst[i] = src[i];
}

// Write-only two-shot: phase 1 pushes this rank's copy of chunk p into slot `rank` of peer p's
// scratch; barrier; phase 2 reduces chunk `rank` (own buffer and the scratch slots, rank order),
// stores it locally and pushes it into every peer's buffer; barrier.
template <typename T>
__global__ void __launch_bounds__(512) two_shot_write_only(const __grid_constant__ Peers bufs, const __grid_constant__ Peers scratch,
        const __grid_constant__ Pads pads, size_t count, int rank, int world) {
    constexpr int N = Vec<T>::N;
    size_t nvec = count / N;
    size_t chunk = (nvec + world - 1) / world;
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4* mine = reinterpret_cast<const uint4*>(bufs.ptr[rank]);
    for (size_t v = tid; v < chunk; v += threads) {
#pragma unroll
        for (int p = 0; p < MAX_RANKS; p++) {
            if (p < world && p != rank && p * chunk + v < nvec) {
                reinterpret_cast<uint4*>(scratch.ptr[p])[rank * chunk + v] = mine[p * chunk + v];
            }
        }
    }
    barrier_blocks(pads, rank, world);
    size_t lo = rank * chunk;
    size_t hi = min(nvec, lo + chunk);
    for (size_t v = lo + tid; v < hi; v += threads) {
        float acc[8];
        float x[8];
        for (int r = 0; r < world; r++) {
            if (r == rank) {
                Vec<T>::load(bufs.ptr[rank], v, x);
            } else {
                Vec<T>::load(scratch.ptr[rank], r * chunk + (v - lo), x);
            }
#pragma unroll
            for (int k = 0; k < N; k++) acc[k] = r == 0 ? x[k] : acc[k] + x[k];
        }
#pragma unroll
        for (int p = 0; p < MAX_RANKS; p++) {
            if (p < world) Vec<T>::store(bufs.ptr[p], v, acc);
        }
    }
    barrier_blocks(pads, rank, world);
}

// Pull-only two-shot: reduce chunk `rank` from every peer (loads), store locally; barrier; load every
// peer's reduced chunk into the local buffer; barrier.
template <typename T>
__global__ void __launch_bounds__(512) two_shot_pull_only(const __grid_constant__ Peers bufs, const __grid_constant__ Pads pads,
        size_t count, int rank, int world) {
    constexpr int N = Vec<T>::N;
    size_t nvec = count / N;
    size_t chunk = (nvec + world - 1) / world;
    size_t threads = (size_t)gridDim.x * blockDim.x;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    barrier_blocks(pads, rank, world);
    size_t lo = rank * chunk;
    size_t hi = min(nvec, lo + chunk);
    for (size_t v = lo + tid; v < hi; v += threads) {
        float acc[8];
        reduce_vector<T>(bufs, world, v, 0, acc);
        Vec<T>::store(bufs.ptr[rank], v, acc);
    }
    barrier_blocks(pads, rank, world);
    for (int p = 0; p < world; p++) {
        if (p == rank) continue;
        size_t plo = p * chunk, phi = min(nvec, plo + chunk);
        for (size_t v = plo + tid; v < phi; v += threads) {
            reinterpret_cast<uint4*>(bufs.ptr[rank])[v] = reinterpret_cast<const uint4*>(bufs.ptr[p])[v];
        }
    }
    barrier_blocks(pads, rank, world);
}

template <typename T>
__global__ void __launch_bounds__(512) two_shot_shipped(const __grid_constant__ Peers bufs, const __grid_constant__ Pads pads, size_t count,
        int rank, int world) {
    two_shot<T>(bufs, pads, count, rank, world, 0);
}

static const int G = 2;
static cudaStream_t stream[G];

static double time_batch(const std::function<void()>& launch_both, int batch) {
    std::vector<double> samples;
    for (int w = 0; w < 2; w++) launch_both();
    for (int d = 0; d < G; d++) { CK(cudaSetDevice(d)); CK(cudaStreamSynchronize(stream[d])); }
    for (int rep = 0; rep < 7; rep++) {
        cudaEvent_t a, b;
        CK(cudaSetDevice(0));
        CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
        CK(cudaEventRecord(a, stream[0]));
        for (int i = 0; i < batch; i++) launch_both();
        CK(cudaSetDevice(0));
        CK(cudaEventRecord(b, stream[0]));
        for (int d = 0; d < G; d++) { CK(cudaSetDevice(d)); CK(cudaStreamSynchronize(stream[d])); }
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        samples.push_back(ms * 1000.0 / batch);
        CK(cudaEventDestroy(a)); CK(cudaEventDestroy(b));
    }
    std::sort(samples.begin(), samples.end());
    return samples[3];
}

int main() {
    int n;
    CK(cudaGetDeviceCount(&n));
    if (n < 2) { fprintf(stderr, "needs 2 GPUs, found %d\n", n); return 1; }
    const size_t maxBytes = 256ull << 20;
    void* buf[G]; void* scr[G]; void* dst[G]; uint32_t* pad[G];
    int sms = 0;
    for (int d = 0; d < G; d++) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceEnablePeerAccess(1 - d, 0));
        CK(cudaStreamCreateWithFlags(&stream[d], cudaStreamNonBlocking));
        CK(cudaMalloc(&buf[d], maxBytes)); CK(cudaMalloc(&scr[d], maxBytes)); CK(cudaMalloc(&dst[d], maxBytes));
        CK(cudaMalloc(&pad[d], 1 << 20)); CK(cudaMemset(pad[d], 0, 1 << 20));
        CK(cudaMemset(buf[d], 0, maxBytes));
        cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, d)); sms = prop.multiProcessorCount;
        if (d == 0) printf("device: %s, %d SMs\n", prop.name, sms);
        CK(cudaDeviceSynchronize());
    }
    Peers bufs{}; Peers scratch{}; Pads pads{};
    for (int d = 0; d < G; d++) { bufs.ptr[d] = buf[d]; scratch.ptr[d] = scr[d]; pads.ptr[d] = pad[d]; }
    if (getenv("PATTERNS") != nullptr) {
    for (size_t bytes : {64ull << 20, 256ull << 20}) {
        int batch = bytes >= (256ull << 20) ? 5 : 10;
        double gb = bytes / 1e9;
        printf("\n== %zu MiB per GPU ==\n", bytes >> 20);
        double t = time_batch([&] { CK(cudaSetDevice(0)); CK(cudaMemcpyPeerAsync(dst[1], 1, buf[0], 0, bytes, stream[0])); }, batch);
        printf("copy engine, one way          %8.1f us  %6.1f GB/s per direction\n", t, gb / (t * 1e-6));
        t = time_batch([&] {
            for (int d = 0; d < G; d++) { CK(cudaSetDevice(d)); CK(cudaMemcpyPeerAsync(dst[1 - d], 1 - d, buf[d], d, bytes, stream[d])); }
        }, batch);
        printf("copy engine, both ways        %8.1f us  %6.1f GB/s per direction\n", t, gb / (t * 1e-6));
        for (int blocks : {sms / 2, sms, 2 * sms, 4 * sms}) {
            t = time_batch([&] {
                for (int d = 0; d < G; d++) { CK(cudaSetDevice(d));
                    copy_kernel<<<blocks, 512, 0, stream[d]>>>((uint4*)dst[1 - d], (const uint4*)buf[d], bytes / 16); }
            }, batch);
            printf("SM push both ways, %4d blk   %8.1f us  %6.1f GB/s per direction\n", blocks, t, gb / (t * 1e-6));
            t = time_batch([&] {
                for (int d = 0; d < G; d++) { CK(cudaSetDevice(d));
                    copy_kernel<<<blocks, 512, 0, stream[d]>>>((uint4*)dst[d], (const uint4*)buf[1 - d], bytes / 16); }
            }, batch);
            printf("SM pull both ways, %4d blk   %8.1f us  %6.1f GB/s per direction\n", blocks, t, gb / (t * 1e-6));
        }
        // the all-reduce designs with a scratch as large as the message (one round, no slot reuse)
        size_t count = bytes / 2;  // bf16
        for (int blocks : {sms / 2, sms, 2 * sms, 4 * sms}) {
            t = time_batch([&] {
                for (int d = 0; d < G; d++) { CK(cudaSetDevice(d));
                    two_shot_shipped<__nv_bfloat16><<<blocks, 512, 0, stream[d]>>>(bufs, pads, count, d, G); }
            }, batch);
            printf("all-reduce pull+push TWO_SHOT %4d blk  %8.1f us  busbw %6.1f GB/s\n", blocks, t, gb / (t * 1e-6));
            t = time_batch([&] {
                for (int d = 0; d < G; d++) { CK(cudaSetDevice(d));
                    two_shot_write_only<__nv_bfloat16><<<blocks, 512, 0, stream[d]>>>(bufs, scratch, pads, count, d, G); }
            }, batch);
            printf("all-reduce write-only         %4d blk  %8.1f us  busbw %6.1f GB/s\n", blocks, t, gb / (t * 1e-6));
            t = time_batch([&] {
                for (int d = 0; d < G; d++) { CK(cudaSetDevice(d));
                    two_shot_pull_only<__nv_bfloat16><<<blocks, 512, 0, stream[d]>>>(bufs, pads, count, d, G); }
            }, batch);
            printf("all-reduce pull-only          %4d blk  %8.1f us  busbw %6.1f GB/s\n", blocks, t, gb / (t * 1e-6));
        }
    }
    }
    int occOld = 0, occPush = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occOld, symmem_two_shot_bf16, 512, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occPush, symmem_two_shot_push_bf16, 512, 0));
    printf("\noccupancy (blocks of 512 per SM): shipped TWO_SHOT %d, write-only TWO_SHOT %d\n", occOld, occPush);
    printf("all-reduce bf16 in place, 2 GPUs, us per op (busbw GB/s)\n");
    printf("%10s %18s", "size", "shipped");
    const size_t slots[] = {1ull << 20, 4ull << 20, 16ull << 20};
    for (size_t slot : slots) printf("   push slot %2zuMiB/%dx", slot >> 20, 2);
    for (size_t slot : slots) printf("   push slot %2zuMiB/%dx", slot >> 20, occPush);
    printf("\n");
    for (size_t bytes : {256ull << 10, 1ull << 20, 4ull << 20, 16ull << 20, 64ull << 20, 256ull << 20}) {
        int batch = bytes >= (64ull << 20) ? 5 : bytes >= (4ull << 20) ? 20 : 100;
        double gb = bytes / 1e9;
        size_t count = bytes / 2;
        size_t nvec = bytes / 16;
        size_t chunk = (nvec + G - 1) / G;
        int oldBlocks = (int)std::min<size_t>((size_t)occOld * sms, (chunk + 1023) / 1024);
        double t = time_batch([&] {
            for (int d = 0; d < G; d++) { CK(cudaSetDevice(d));
                symmem_two_shot_bf16<<<oldBlocks, 512, 0, stream[d]>>>(bufs, pads, count, d, G, 0); }
        }, batch);
        printf("%7zu KiB %9.1f (%5.1f)", bytes >> 10, t, gb / (t * 1e-6));
        for (int perSm : {2, occPush}) {
            for (size_t slot : slots) {
                size_t len = std::min(slot / 16, chunk);
                int blocks = (int)std::max<size_t>(1, std::min<size_t>((size_t)perSm * sms, (len + 511) / 512));
                t = time_batch([&] {
                    for (int d = 0; d < G; d++) { CK(cudaSetDevice(d));
                        symmem_two_shot_push_bf16<<<blocks, 512, 0, stream[d]>>>(bufs, scratch, pads, count, d, G, 0, slot); }
                }, batch);
                printf("   %9.1f (%5.1f)     ", t, gb / (t * 1e-6));
            }
        }
        printf("\n");
    }
    return 0;
}
