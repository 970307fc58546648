// The physical limits between the GPUs of one machine, for any number of GPUs: what an all-reduce's time
// is measured against (issue #38). Standalone (CUDA runtime, statically linked), one process driving every
// GPU it sees. Prints one CSV row per measurement to stdout (and a human summary to stderr):
//   test,src,dst,grid,bytes,seconds,GBps
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -o peer_limits bench/gpu/peer_limits.cu && ./peer_limits [MiB per copy, default 256]
// (bench/gpu/pack.sh PROBES=1 builds it into .device/; bench/gpu/run-on-device.sh limits runs it there)
//
// Measured, median of 7 timed repetitions after 2 warm-ups, each repetition a batch of 4 transfers:
//   ce_pair       copy engine, one ordered pair at a time (cudaMemcpyPeerAsync on the source's stream)
//   ce_all        copy engine, every GPU to every other GPU at once (one stream per ordered pair), per-GPU
//                 egress = (N-1) copies / time
//   sm_push_pair  SM stores into the peer's memory (uint4), one pair at a time, over grid sizes
//   sm_pull_pair  SM loads from the peer's memory into local memory, one pair at a time, over grid sizes
//   sm_push_all   every GPU's kernel stores into every peer at once (blocks split evenly over the peers)
//   sm_pull_all   every GPU's kernel loads from every peer at once
//   tma_push_pair bulk stores (cp.async.bulk, the Tensor Memory Accelerator) of a shared-memory tile into one
//                 peer, one pair at a time, over grid sizes (grid = blocks of one warp; thread 0 issues, at most
//                 8 bulk groups in flight per block): the store path that leaves the SMs free (sm_90+)
//   tma_push_all  the same from every GPU into every peer at once (blocks split evenly over the peers)
//   flag_rtt      one-way latency of a flag store seen by the peer (ping-pong of 10^4 round trips, 1 thread
//                 a side, system-scope release/acquire): the floor of one barrier step
// The bandwidth floor of a bandwidth-optimal all-reduce of S bytes (reduce-scatter + all-gather, every link
// busy) is 2 (N-1)/N * S / egress, with egress the best of ce_all and sm_push_all/sm_pull_all per GPU.
#include "probe_common.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

static int ngpu;
static size_t bytes;

__global__ void push_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n) {
    size_t threads = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += threads) dst[i] = src[i];
}

// every peer gets an even share of the blocks; block b serves peer (b % peers)
struct Ptrs { uint4* p[8]; };

__global__ void push_all_kernel(Ptrs dst, const uint4* __restrict__ src, int peers, size_t n) {
    int peer = blockIdx.x % peers;
    int lane = blockIdx.x / peers;
    int lanes = gridDim.x / peers;
    size_t threads = (size_t)lanes * blockDim.x;
    uint4* d = dst.p[peer];
    for (size_t i = (size_t)lane * blockDim.x + threadIdx.x; i < n; i += threads) d[i] = src[i];
}

__global__ void pull_all_kernel(uint4* __restrict__ dst, Ptrs src, int peers, size_t n) {
    int peer = blockIdx.x % peers;
    int lane = blockIdx.x / peers;
    int lanes = gridDim.x / peers;
    size_t threads = (size_t)lanes * blockDim.x;
    const uint4* s = src.p[peer];
    uint4* d = dst + (size_t)peer * n;
    for (size_t i = (size_t)lane * blockDim.x + threadIdx.x; i < n; i += threads) d[i] = s[i];
}


// Bulk stores of one shared-memory tile (contents irrelevant: the probe measures the link) into the peers'
// memory: block b serves peer (b % peers), tiles strided over the blocks of that peer.
__global__ void tma_push_kernel(Ptrs dst, int peers, size_t bytesPerPeer, unsigned tile) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char smem[];
    for (unsigned i = threadIdx.x; i < tile / 4; i += blockDim.x) reinterpret_cast<unsigned*>(smem)[i] = i;
    __syncthreads();
    // the bulk copy reads shared memory through the async proxy: order the generic-proxy writes before it
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        int peer = blockIdx.x % peers;
        size_t lane = blockIdx.x / peers;
        size_t lanes = gridDim.x / peers;
        char* d = reinterpret_cast<char*>(dst.p[peer]);
        unsigned s = (unsigned)__cvta_generic_to_shared(smem);
        size_t tiles = bytesPerPeer / tile;
        for (size_t t = lane; t < tiles; t += lanes) {
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                         :: "l"(d + t * tile), "r"(s), "r"(tile) : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            asm volatile("cp.async.bulk.wait_group.read 8;" ::: "memory");
        }
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
#endif
}

// ping-pong: side 0 writes peer's flag = k, waits for own flag = k; side 1 mirrors. System-scope ordering.
__global__ void pingpong_kernel(volatile unsigned* mine, volatile unsigned* theirs, int side, int rounds) {
    for (int k = 1; k <= rounds; k++) {
        if (side == 0) {
            __threadfence_system();
            *theirs = k;
            while (*mine != (unsigned)k) { }
        } else {
            while (*mine != (unsigned)k) { }
            __threadfence_system();
            *theirs = k;
        }
    }
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static void sync_all() {
    for (int d = 0; d < ngpu; d++) { CK(cudaSetDevice(d)); CK(cudaDeviceSynchronize()); }
}

// times `batch` (which enqueues work on any devices) by the host clock around a full synchronisation
static double time_batch(const std::function<void()>& batch) {
    for (int w = 0; w < 2; w++) { batch(); sync_all(); }
    std::vector<double> t;
    for (int r = 0; r < 7; r++) {
        sync_all();
        double t0 = now_us();
        for (int k = 0; k < 4; k++) batch();
        sync_all();
        t.push_back((now_us() - t0) / 4 * 1e-6);
    }
    return median(t);
}

static void row(const char* test, int src, int dst, int grid, size_t b, double s) {
    double gbps = b / s / 1e9;
    printf("%s,%d,%d,%d,%zu,%.9f,%.1f\n", test, src, dst, grid, b, s, gbps);
    fflush(stdout);
    fprintf(stderr, "%-13s %d->%d grid=%-4d %8.1f MiB %9.1f us %7.1f GB/s\n", test, src, dst, grid, b / 1048576.0, s * 1e6, gbps);
}

int main(int argc, char** argv) {
    size_t mib = argc > 1 ? strtoull(argv[1], nullptr, 10) : 256;
    bytes = mib << 20;
    CK(cudaGetDeviceCount(&ngpu));
    if (ngpu < 2 || ngpu > 8) { fprintf(stderr, "peer_limits: needs 2..8 GPUs, found %d\n", ngpu); return 2; }
    std::vector<uint4*> src(ngpu), dst(ngpu), wide(ngpu);
    std::vector<cudaStream_t> stream(ngpu);
    std::vector<std::vector<cudaStream_t>> pair(ngpu, std::vector<cudaStream_t>(ngpu));
    int sms = 0;
    for (int d = 0; d < ngpu; d++) {
        CK(cudaSetDevice(d));
        for (int p = 0; p < ngpu; p++) {
            if (p == d) continue;
            int can = 0;
            CK(cudaDeviceCanAccessPeer(&can, d, p));
            if (!can) { fprintf(stderr, "peer_limits: GPU %d cannot access GPU %d\n", d, p); return 2; }
            CK(cudaDeviceEnablePeerAccess(p, 0));
            CK(cudaStreamCreateWithFlags(&pair[d][p], cudaStreamNonBlocking));
        }
        CK(cudaMalloc(&src[d], bytes));
        CK(cudaMalloc(&dst[d], bytes));
        // room for one share from every peer (pull_all)
        CK(cudaMalloc(&wide[d], bytes / (ngpu - 1) * (ngpu - 1) + 4096));
        CK(cudaMemset(src[d], d + 1, bytes));
        CK(cudaStreamCreateWithFlags(&stream[d], cudaStreamNonBlocking));
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, d));
        sms = prop.multiProcessorCount;
        if (d == 0) fprintf(stderr, "%d x %s, %d SMs, %zu MiB per copy\n", ngpu, prop.name, sms, mib);
    }
    printf("test,src,dst,grid,bytes,seconds,GBps\n");
    size_t n = bytes / sizeof(uint4);
    const int block = 512;

    // copy engine, one pair at a time
    for (int s = 0; s < ngpu; s++)
        for (int d = 0; d < ngpu; d++) {
            if (s == d) continue;
            double t = time_batch([&] { CK(cudaMemcpyPeerAsync(dst[d], d, src[s], s, bytes, stream[s])); });
            row("ce_pair", s, d, 0, bytes, t);
        }
    // copy engine, all ordered pairs at once: each GPU sends bytes/(N-1) to every peer
    {
        size_t share = bytes / (ngpu - 1) / 4096 * 4096;
        double t = time_batch([&] {
            for (int s = 0; s < ngpu; s++) {
                CK(cudaSetDevice(s));
                for (int d = 0; d < ngpu; d++) {
                    if (s == d) continue;
                    int slot = s < d ? s : s - 1;
                    CK(cudaMemcpyPeerAsync((char*)dst[d] + slot * share, d, src[s], s, share, pair[s][d]));
                }
            }
        });
        row("ce_all", -1, -1, 0, share * (ngpu - 1), t);
    }
    // SM push / pull, one pair (0 -> each peer, and the reverse direction of 0 <-> 1), over grid sizes
    int grids[] = {8, 16, 32, 66, sms, 2 * sms};
    for (int d = 1; d < ngpu; d++)
        for (int g : grids) {
            CK(cudaSetDevice(0));
            double t = time_batch([&] { push_kernel<<<g, block, 0, stream[0]>>>(dst[d], src[0], n); CK(cudaGetLastError()); });
            row("sm_push_pair", 0, d, g, bytes, t);
            t = time_batch([&] { CK(cudaSetDevice(0)); push_kernel<<<g, block, 0, stream[0]>>>(dst[0], src[d], n); CK(cudaGetLastError()); });
            row("sm_pull_pair", d, 0, g, bytes, t);
        }
    // SM push / pull from every GPU to every peer at once
    int peers = ngpu - 1;
    size_t shareVec = n / peers;
    for (int g : {peers * 8, peers * 16, (sms / peers) * peers, 2 * (sms / peers) * peers}) {
        double t = time_batch([&] {
            for (int s = 0; s < ngpu; s++) {
                CK(cudaSetDevice(s));
                Ptrs p{};
                int k = 0;
                for (int d = 0; d < ngpu; d++) if (d != s) p.p[k++] = dst[d] + (size_t)(s < d ? s : s - 1) * shareVec;
                push_all_kernel<<<g, block, 0, stream[s]>>>(p, src[s], peers, shareVec);
                CK(cudaGetLastError());
            }
        });
        row("sm_push_all", -1, -1, g, shareVec * sizeof(uint4) * peers, t);
        t = time_batch([&] {
            for (int s = 0; s < ngpu; s++) {
                CK(cudaSetDevice(s));
                Ptrs p{};
                int k = 0;
                for (int d = 0; d < ngpu; d++) if (d != s) p.p[k++] = src[d];
                pull_all_kernel<<<g, block, 0, stream[s]>>>(wide[s], p, peers, shareVec);
                CK(cudaGetLastError());
            }
        });
        row("sm_pull_all", -1, -1, g, shareVec * sizeof(uint4) * peers, t);
    }
    // TMA bulk stores: one pair (0 -> 1), then every GPU into every peer at once, over tiles and grids
    for (unsigned tile : {16384u, 32768u}) {
        CK(cudaSetDevice(0));
        for (int d = 0; d < ngpu; d++) {
            CK(cudaSetDevice(d));
            CK(cudaFuncSetAttribute(tma_push_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
        }
        for (int g : {32, 66, sms, 2 * sms}) {
            CK(cudaSetDevice(0));
            Ptrs one{};
            one.p[0] = dst[1];
            double t = time_batch([&] { CK(cudaSetDevice(0)); tma_push_kernel<<<g, 32, tile, stream[0]>>>(one, 1, bytes, tile); CK(cudaGetLastError()); });
            char name[32];
            snprintf(name, sizeof name, "tma_push_pair_%uk", tile / 1024);
            row(name, 0, 1, g, bytes, t);
        }
        for (int g : {peers * 16, (sms / peers) * peers, 2 * (sms / peers) * peers, 4 * (sms / peers) * peers}) {
            size_t share = shareVec * sizeof(uint4) / tile * tile;
            double t = time_batch([&] {
                for (int s = 0; s < ngpu; s++) {
                    CK(cudaSetDevice(s));
                    Ptrs p{};
                    int k = 0;
                    for (int d = 0; d < ngpu; d++) if (d != s) p.p[k++] = (uint4*)((char*)dst[d] + (size_t)(s < d ? s : s - 1) * share);
                    tma_push_kernel<<<g, 32, tile, stream[s]>>>(p, peers, share, tile);
                    CK(cudaGetLastError());
                }
            });
            char name[32];
            snprintf(name, sizeof name, "tma_push_all_%uk", tile / 1024);
            row(name, -1, -1, g, share * peers, t);
        }
    }
    // flag latency between GPU 0 and each peer
    const int rounds = 10000;
    std::vector<unsigned*> flag(ngpu);
    for (int d = 0; d < ngpu; d++) { CK(cudaSetDevice(d)); CK(cudaMalloc(&flag[d], 256)); }
    for (int d = 1; d < ngpu; d++) {
        for (int x : {0, d}) { CK(cudaSetDevice(x)); CK(cudaMemset(flag[x], 0, 256)); }
        sync_all();
        double t0 = now_us();
        CK(cudaSetDevice(d));
        pingpong_kernel<<<1, 1, 0, stream[d]>>>(flag[d], flag[0], 1, rounds);
        CK(cudaSetDevice(0));
        pingpong_kernel<<<1, 1, 0, stream[0]>>>(flag[0], flag[d], 0, rounds);
        sync_all();
        double oneWay = (now_us() - t0) * 1e-6 / (2.0 * rounds);
        row("flag_rtt", 0, d, 1, 4, oneWay);
    }
    return 0;
}
