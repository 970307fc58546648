// Reproduces, outside the JVM, the "slow state" of eager symmem4j collectives on the 2-GPU H200
// machine (bench/results/2026-11-22-gpu-eager-probe-2xh200.md) and varies one thing at a time.
// Two host threads, one per GPU, peer access on, each loop iteration: meet at a spin barrier (as
// symmem4j's argument check does), then launch one kernel, never synchronizing; report the host
// time per call, and how long the stream needed after the last launch (a short drain means the host
// was not ahead of the GPU). Kernels: thread 0 stores the iteration number into the peer's flag,
// then waits until its own flag reaches it; the waits differ in how they poll:
//   acquire.sys  ld.acquire.sys (what symmem4j's barrier does)
//   relaxed.sys  ld.relaxed.sys, then fence.acq_rel.sys
//   volatile     ld.volatile, then fence.acq_rel.sys
//   no wait      stores the flag, does not wait (no cross-GPU dependency)
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -o handshake_launch_probe bench/gpu/handshake_launch_probe.cu
#include "probe_common.h"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <thread>
#include <vector>


__global__ void handshake(unsigned int* mine, unsigned int* peer, unsigned int value, int mode) {
    if (threadIdx.x != 0 || blockIdx.x != 0) {
        return;
    }
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(peer), "r"(value) : "memory");
    if (mode == 3) {
        return;
    }
    unsigned int seen = 0;
    do {
        if (mode == 0) {
            asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(mine) : "memory");
        } else if (mode == 1) {
            asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(mine) : "memory");
        } else {
            asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(seen) : "l"(mine) : "memory");
        }
    } while ((int)(seen - value) < 0);
    if (mode != 0) {
        asm volatile("fence.acq_rel.sys;" ::: "memory");
    }
}

int main() {
    int devices = 0;
    CK(cudaGetDeviceCount(&devices));
    if (devices < 2) {
        fprintf(stderr, "needs 2 GPUs, found %d\n", devices);
        return 1;
    }
    unsigned int* flag[2];
    cudaStream_t stream[2];
    for (int d = 0; d < 2; d++) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceEnablePeerAccess(1 - d, 0));
        CK(cudaMalloc(&flag[d], 256));
        CK(cudaMemset(flag[d], 0, 256));
        CK(cudaStreamCreateWithFlags(&stream[d], cudaStreamNonBlocking));
        CK(cudaDeviceSynchronize());
    }
    const char* names[] = {"acquire.sys", "relaxed.sys", "volatile", "no wait"};
    const int calls = 2000;
    unsigned int value = 0;
    printf("two threads, one per GPU, %d calls each: meet, launch (no sync); GPU 0's thread\n", calls);
    for (int pass = 0; pass < 3; pass++) {
        for (int mode = 0; mode < 4; mode++) {
            std::atomic<int> arrived{0};
            double perCall[2];
            double drain[2];
            unsigned int start = value;
            auto body = [&](int d) {
                CK(cudaSetDevice(d));
                CK(cudaStreamSynchronize(stream[d]));
                double t0 = now_us();
                for (int i = 0; i < calls; i++) {
                    arrived.fetch_add(1);
                    while (arrived.load() < 2 * (i + 1)) {
                    }
                    handshake<<<1, 32, 0, stream[d]>>>(flag[d], flag[1 - d], start + i + 1, mode);
                }
                double t1 = now_us();
                CK(cudaStreamSynchronize(stream[d]));
                perCall[d] = (t1 - t0) / calls;
                drain[d] = now_us() - t1;
            };
            std::thread other(body, 1);
            body(0);
            other.join();
            value = start + calls;
            printf("pass %d  %-12s host %7.2f us/call, drain %8.1f us   (GPU 1's thread: %7.2f us/call)\n", pass, names[mode],
                   perCall[0], drain[0], perCall[1]);
        }
    }
    CK(cudaGetLastError());
    return 0;
}
