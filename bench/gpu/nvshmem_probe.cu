// NVSHMEM's host library as symmem4j binds it (dlopen, exported C symbols only, our own copies of its
// structs' layouts), outside the JVM: checks that the layouts and the calls symmem4j's Nvshmem class
// makes work on this machine before the Java binding is blamed for anything. Run one process per PE:
//   nvshmem_probe RANK NRANKS DIR [LIB]
// rank 0 writes NVSHMEM's unique id to DIR/uid-<round>, the others read it (the rendezvous store's job
// in symmem4j). Each round: init by unique id, my_pe/n_pes, heap allocation, nvshmem_ptr of every PE,
// put-with-signal to the next PE and an on-stream wait, the same captured in a CUDA graph and replayed,
// a float sum all-reduce on the stream, free, finalize. Two rounds: teardown and re-init in one process.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CU(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "rank %d: %s failed: %s (%s:%d)\n", rank, #x, cudaGetErrorString(e_), __FILE__, __LINE__); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int rank;

// the layouts symmem4j writes (nvshmem_uniqueid.h, nvshmem_types.h of NVSHMEM 3.4)
static const size_t UID_BYTES = 128, ATTR_BYTES = 144;

template <typename F>
static F sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "rank %d: %s missing: %s\n", rank, name, dlerror());
        exit(1);
    }
    return reinterpret_cast<F>(p);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: nvshmem_probe RANK NRANKS DIR [LIB]\n");
        return 2;
    }
    rank = atoi(argv[1]);
    int n = atoi(argv[2]);
    std::string dir = argv[3];
    const char *path = argc > 4 ? argv[4] : "libnvshmem_host.so.3";
    void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "rank %d: dlopen %s: %s\n", rank, path, dlerror());
        return 1;
    }
    auto get_uid = sym<int (*)(void *)>(lib, "nvshmemx_get_uniqueid");
    auto set_uid = sym<int (*)(int, int, const void *, void *)>(lib, "nvshmemx_set_attr_uniqueid_args");
    auto init = sym<int (*)(unsigned, void *)>(lib, "nvshmemx_hostlib_init_attr");
    auto fin = sym<void (*)()>(lib, "nvshmemx_hostlib_finalize");
    auto my_pe = sym<int (*)()>(lib, "nvshmem_my_pe");
    auto n_pes = sym<int (*)()>(lib, "nvshmem_n_pes");
    auto smalloc = sym<void *(*)(size_t)>(lib, "nvshmem_malloc");
    auto sfree = sym<void (*)(void *)>(lib, "nvshmem_free");
    auto sptr = sym<void *(*)(const void *, int)>(lib, "nvshmem_ptr");
    auto put_signal = sym<void (*)(void *, const void *, size_t, uint64_t *, uint64_t, int, int, cudaStream_t)>(
        lib, "nvshmemx_putmem_signal_on_stream");
    auto wait_until = sym<void (*)(uint64_t *, int, uint64_t, cudaStream_t)>(lib, "nvshmemx_signal_wait_until_on_stream");
    auto signal_op = sym<void (*)(uint64_t *, uint64_t, int, int, cudaStream_t)>(lib, "nvshmemx_signal_op_on_stream");
    auto sum_reduce = sym<int (*)(int, float *, const float *, size_t, cudaStream_t)>(lib, "nvshmemx_float_sum_reduce_on_stream");
    auto barrier_all = sym<void (*)()>(lib, "nvshmem_barrier_all");
    auto version = sym<void (*)(int *, int *)>(lib, "nvshmem_info_get_version");
    auto init_status = sym<int (*)()>(lib, "nvshmemx_init_status");

    int devices = 0;
    CU(cudaGetDeviceCount(&devices));
    CU(cudaSetDevice(rank % devices));
    cudaStream_t stream;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int major = 0, minor = 0;
    version(&major, &minor);
    printf("rank %d: OpenSHMEM spec %d.%d, device %d of %d, init status before %d\n", rank, major, minor, rank % devices,
           devices, init_status());
    for (int round = 0; round < 2; round++) {
        unsigned char uid[UID_BYTES] = {0};
        *(int *)uid = (1 << 16) + (int)UID_BYTES;
        std::string file = dir + "/uid-" + std::to_string(round);
        if (rank == 0) {
            int rc = get_uid(uid);
            if (rc) {
                fprintf(stderr, "get_uniqueid rc=%d\n", rc);
                return 1;
            }
            std::string tmp = file + ".tmp";
            FILE *f = fopen(tmp.c_str(), "wb");
            fwrite(uid, 1, UID_BYTES, f);
            fclose(f);
            rename(tmp.c_str(), file.c_str());
        } else {
            FILE *f = nullptr;
            for (int i = 0; i < 6000 && !(f = fopen(file.c_str(), "rb")); i++) usleep(10000);
            if (!f) {
                fprintf(stderr, "rank %d: no %s\n", rank, file.c_str());
                return 1;
            }
            if (fread(uid, 1, UID_BYTES, f) != UID_BYTES) return 1;
            fclose(f);
        }
        unsigned char attr[ATTR_BYTES] = {0};
        *(int *)(attr + 0) = (1 << 16) + (int)ATTR_BYTES;  // version
        *(int *)(attr + 16) = (1 << 16) + 128;             // args.version
        *(int *)(attr + 24) = (1 << 16) + 24;              // args.uid_args.version
        int rc = set_uid(rank, n, uid, attr);
        printf("rank %d round %d: set_attr_uniqueid_args rc=%d myrank@40=%d nranks@44=%d\n", rank, round, rc,
               *(int *)(attr + 40), *(int *)(attr + 44));
        rc = init(1 << 3, attr);
        printf("rank %d round %d: hostlib_init_attr rc=%d my_pe=%d n_pes=%d status=%d\n", rank, round, rc, my_pe(), n_pes(),
               init_status());
        if (rc) return 1;
        CU(cudaSetDevice(rank % devices));
        const size_t count = 1 << 20;
        float *data = (float *)smalloc(count * sizeof(float));
        uint64_t *pad = (uint64_t *)smalloc(4096);
        float *src = (float *)smalloc(count * sizeof(float));
        printf("rank %d: data=%p pad=%p\n", rank, (void *)data, (void *)pad);
        CU(cudaMemset(pad, 0, 4096));
        for (int pe = 0; pe < n; pe++) printf("rank %d: nvshmem_ptr(data, %d)=%p\n", rank, pe, sptr(data, pe));
        std::vector<float> host(count);
        for (size_t i = 0; i < count; i++) host[i] = (float)(rank * 1000 + i % 997);
        CU(cudaMemcpy(src, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
        barrier_all();
        int next = (my_pe() + 1) % n, prev = (my_pe() + n - 1) % n;
        // eager: put to the next PE, signal ADD 1 on its slot 0; wait for ours, take the count back
        put_signal(data, src, count * sizeof(float), pad, 1, 10, next, stream);
        wait_until(pad, 5 /* GE */, 1, stream);
        signal_op(pad, (uint64_t)-1, 10, my_pe(), stream);
        CU(cudaStreamSynchronize(stream));
        CU(cudaMemcpy(host.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < count; i++) bad += host[i] != (float)(prev * 1000 + i % 997);
        uint64_t slot = 7;
        CU(cudaMemcpy(&slot, pad, 8, cudaMemcpyDeviceToHost));
        printf("rank %d: eager put-with-signal from %d: %zu wrong, slot after consume %llu\n", rank, prev, bad,
               (unsigned long long)slot);
        // graph: the same captured, replayed 3 times
        barrier_all();
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaError_t cap = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
        put_signal(data, src, count * sizeof(float), pad, 1, 10, next, stream);
        wait_until(pad, 5, 1, stream);
        signal_op(pad, (uint64_t)-1, 10, my_pe(), stream);
        cudaError_t end = cudaStreamEndCapture(stream, &graph);
        printf("rank %d: capture begin=%d end=%d\n", rank, cap, end);
        if (cap == cudaSuccess && end == cudaSuccess) {
            CU(cudaGraphInstantiate(&exec, graph, 0));
            for (int r = 0; r < 3; r++) CU(cudaGraphLaunch(exec, stream));
            CU(cudaStreamSynchronize(stream));
            CU(cudaMemcpy(&slot, pad, 8, cudaMemcpyDeviceToHost));
            printf("rank %d: 3 graph replays done, slot %llu\n", rank, (unsigned long long)slot);
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
        }
        barrier_all();
        // all-reduce: every PE's src summed into data
        rc = sum_reduce(0, data, src, count, stream);
        CU(cudaStreamSynchronize(stream));
        CU(cudaMemcpy(host.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost));
        bad = 0;
        for (size_t i = 0; i < count; i++) {
            double e = 0;
            for (int p = 0; p < n; p++) e += p * 1000 + i % 997;
            bad += host[i] != (float)e;
        }
        printf("rank %d: float sum reduce rc=%d, %zu wrong\n", rank, rc, bad);
        // in place
        rc = sum_reduce(0, src, src, count, stream);
        CU(cudaStreamSynchronize(stream));
        CU(cudaMemcpy(host.data(), src, count * sizeof(float), cudaMemcpyDeviceToHost));
        bad = 0;
        for (size_t i = 0; i < count; i++) {
            double e = 0;
            for (int p = 0; p < n; p++) e += p * 1000 + i % 997;
            bad += host[i] != (float)e;
        }
        printf("rank %d: in-place float sum reduce rc=%d, %zu wrong\n", rank, rc, bad);
        sfree(src);
        sfree(pad);
        sfree(data);
        fin();
        printf("rank %d round %d: finalized, status %d\n", rank, round, init_status());
    }
    printf("rank %d: PROBE OK\n", rank);
    return 0;
}
