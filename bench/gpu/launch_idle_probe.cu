// Does a kernel launch cost the host more when the GPU has been idle for a while? The eager
// collectives on the 2- and 4-GPU H200 machines sit in a slow state where every launch finds the
// GPU idle (bench/results/2026-11-22-gpu-eager-probe-2xh200.md); this measures the host time of one
// launch call, alone on one GPU with no peer and no JVM, after the host has waited `gap` µs:
//   idle:   the previous (empty) kernel has long finished when the launch comes
//   busy:   a kernel that spins on the GPU for gap + 50 µs was launched first, so the launch lands
//           behind running work
// for cudaLaunchKernel of an empty kernel and cudaGraphLaunch of a one-kernel graph. Then, with 2
// GPUs, the same from two host threads (one per GPU, as symmem4j's in-JVM ranks), launching in
// lock-step after a spin barrier (as after symmem4j's argument check), without and with peer
// access enabled, onto idle GPUs.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -o launch_idle_probe bench/gpu/launch_idle_probe.cu && ./launch_idle_probe
// (bench/gpu/pack.sh builds it into .device/; bench/gpu/run-on-device.sh launch runs it there)
#include "probe_common.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <cuda_runtime.h>
#include <thread>
#include <vector>


__global__ void empty_kernel() {}

__global__ void spin_kernel(unsigned long long ns) {
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned long long t = start;
    while (t - start < ns) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    }
}

/** A one-node graph of empty_kernel, captured on `s`. */
static cudaGraphExec_t empty_kernel_graph(cudaStream_t s, cudaGraph_t* graph) {
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    empty_kernel<<<1, 32, 0, s>>>();
    CK(cudaStreamEndCapture(s, graph));
    CK(cudaGraphInstantiate(&exec, *graph, 0));
    return exec;
}

static void spin_host(double us) {
    double end = now_us() + us;
    while (now_us() < end) {
    }
}

int main() {
    int devices = 0;
    CK(cudaGetDeviceCount(&devices));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device 0 of %d: %s\n", devices, prop.name);
    CK(cudaSetDevice(0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec = empty_kernel_graph(s, &graph);
    for (int i = 0; i < 2000; i++) {
        empty_kernel<<<1, 32, 0, s>>>();
        CK(cudaGraphLaunch(exec, s));
    }
    CK(cudaStreamSynchronize(s));
    const int reps = 300;
    printf("host time of one launch call, us: median / p90 / max of %d\n", reps);
    printf("%8s  %26s  %26s  %26s  %26s\n", "gap us", "kernel, GPU idle", "kernel, behind busy", "graph, GPU idle",
           "graph, behind busy");
    for (double gap : {0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0}) {
        printf("%8.0f", gap);
        for (int graphMode = 0; graphMode < 2; graphMode++) {
            for (int busy = 0; busy < 2; busy++) {
                std::vector<double> t;
                for (int r = 0; r < reps; r++) {
                    if (busy) {
                        spin_kernel<<<1, 32, 0, s>>>((unsigned long long)((gap + 50.0) * 1000.0));
                    } else {
                        CK(cudaStreamSynchronize(s));
                    }
                    spin_host(gap);
                    double t0 = now_us();
                    if (graphMode) {
                        CK(cudaGraphLaunch(exec, s));
                    } else {
                        empty_kernel<<<1, 32, 0, s>>>();
                    }
                    t.push_back(now_us() - t0);
                    if (busy) {
                        CK(cudaStreamSynchronize(s));
                    }
                }
                std::sort(t.begin(), t.end());
                printf("  %8.2f / %6.2f / %7.1f", t[reps / 2], t[reps * 9 / 10], t.back());
            }
        }
        printf("\n");
    }
    CK(cudaGetLastError());
    if (devices < 2) {
        return 0;
    }
    // Two threads in lock-step, one per GPU.
    std::atomic<int> arrived{0};
    auto meet = [&](int generation) {
        arrived.fetch_add(1);
        while (arrived.load() < 2 * generation) {
        }
    };
    for (int peer = 0; peer < 2; peer++) {
        if (peer) {
            for (int d = 0; d < 2; d++) {
                CK(cudaSetDevice(d));
                CK(cudaDeviceEnablePeerAccess(1 - d, 0));
            }
        }
        printf("two threads, one per GPU, launching together onto idle GPUs%s: us, median / p90 / max of %d (GPU 0's thread)\n",
               peer ? ", peer access on" : "", reps);
        printf("%8s  %26s  %26s  %26s\n", "gap us", "kernel, both threads", "kernel, GPU 0's thread only", "graph, both threads");
        for (double gap : {0.0, 5.0, 20.0, 100.0}) {
            printf("%8.0f", gap);
            for (int mode = 0; mode < 3; mode++) {
                std::vector<double> t0s;
                arrived.store(0);
                auto body = [&](int d, std::vector<double>* out) {
                    CK(cudaSetDevice(d));
                    cudaStream_t st;
                    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
                    cudaGraph_t g;
                    cudaGraphExec_t ge = empty_kernel_graph(st, &g);
                    for (int r = 0; r < reps + 50; r++) {
                        CK(cudaStreamSynchronize(st));
                        meet(r + 1);
                        spin_host(gap);
                        double t0 = now_us();
                        if (mode == 2) {
                            CK(cudaGraphLaunch(ge, st));
                        } else if (mode == 0 || d == 0) {
                            empty_kernel<<<1, 32, 0, st>>>();
                        }
                        if (out != nullptr && r >= 50) {
                            out->push_back(now_us() - t0);
                        }
                    }
                    CK(cudaStreamSynchronize(st));
                    CK(cudaGraphExecDestroy(ge));
                    CK(cudaGraphDestroy(g));
                    CK(cudaStreamDestroy(st));
                };
                std::thread other(body, 1, nullptr);
                body(0, &t0s);
                other.join();
                std::sort(t0s.begin(), t0s.end());
                printf("  %8.2f / %6.2f / %7.1f", t0s[reps / 2], t0s[reps * 9 / 10], t0s.back());
            }
            printf("\n");
        }
    }
    return 0;
}
