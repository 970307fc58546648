#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .device/ carried (see bench/gpu/pack.sh):
# the GPU tests, then the GPU all-reduce and pipeline hand-off benchmarks. Logs, reports and each report's raw
# CSV (gpu-allreduce.csv, gpu-handoff.csv, gpu-eager-probe.csv) land in $OUT.
#   run-on-device.sh [tests|shared|bench|handoff|all|multi|targets|tp|tprepeat|nsys|probe|nvlink|limits|launch|ab|nvshmem|hierarchical|processshare|fsdp|remoteshard|sessions|doctor] [extra all-reduce benchmark args]
# (nsys: issue #36, Nsight Systems profile (-t cuda,nvtx) of TensorParallelGemmBench, the tensor-parallel MLP block
# included, on all visible GPUs in one JVM, eager: tp-mlp.nsys-rep, nsys-nvtx-sum.txt (symmem4j's NVTX ranges),
# nsys-kern-sum.txt (the kernels), tp-mlp-timeline.svg (one MLP step, bench/gpu/nsys_timeline.py) and the SQLite
# export (tp-mlp.sqlite.gz) in $OUT; NSYS_TP_ARGS replaces the benchmark's short default arguments, NSYS overrides
# the nsys found; see docs/nvtx.md)
# (fsdp: issue #31, the MLP block's fully sharded training step, ours (FsdpMlpBench) against PyTorch FSDP2 in the same
# call, 2 and 4 GPUs where there are; fsdp-table.md has the ratios; see the fsdp block below and docs/gpu-fsdp.md)
# (remoteshard: issue #33, the distributed tensor's GPU test, then GpuRemoteShardBench on each GPU count in
# REMOTE_GPUS (default "2 4": the counts the machine has): rank 0 reads 1 KiB-256 MiB of a peer's shard by a kernel's
# zero-copy loads and by the copy engine, against NCCL send/recv of the same bytes, in the same run, and up to 256 KiB
# by a kernel that is already running (remote_read_rounds, timed by the GPU's clock); extra args go to the benchmark,
# e.g. --reps 9, --max-bytes 67108864 or --in-kernel-max-bytes 0)
# (sessions: issue #34, the GPU session cache's test (CudaDeviceSessionCacheTest; GPU_TEST_FILTER widens it, e.g.
# 'CudaDeviceSessionCache|CudaDeviceParameterCache'; RANKS ranks, default 2), then GpuSessionCacheBench with 2 ranks (a
# GPU each where there are 2, else sharing GPU 0 without the NCCL anchor): rank 1 gets an 8 KiB / 64 KiB / 1 MiB
# session block saved by rank 0, find (the directory's host lookup), the held block's copy and the check after use
# timed apart, against NCCL send/recv of the same bytes; sessions-summary.txt, gpu-sessions.md and the logs in $OUT;
# extra args go to the benchmark, e.g. --reps 15; each step bounded by SESSIONS_LIMIT s, default 300)
# (tp: TensorParallelGemmBench, fused all-gather + matmul and matmul + reduce-scatter against cuBLAS + NCCL and
# cuBLAS alone, and the tensor-parallel MLP block's overhead, one rank per GPU; also the last step of multi)
# (multi: for a machine of several GPUs, in one call: the GPU tests with one rank per GPU on every rank count in
# MULTI_TEST_RANKS (default: all GPUs, then 2), the all-reduce
# benchmark with its calibrated threshold rows on every GPU count in MULTI_GPUS (default: all GPUs, then 2;
# the first N GPUs through CUDA_VISIBLE_DEVICES), and the pipeline hand-off benchmark on all GPUs; the
# reports and logs come back as one archive, multi-raw.tar.gz, beside multi-summary.txt)
# (shared: the GPU tests once per rank count in RANKS, default "8 4 2", every count's ranks sharing
# the machine's GPUs, -Dsymmem4j.test.cudaRanks=N, CUDA_DEVICE_MAX_CONNECTIONS=32 unless set, each test
# class's JVM limited to SHARED_LIMIT s (default 300); logs gpu-tests-Nranks-runK.log and gpu-tests-summary.txt)
# (ab: this tree against the base commit packed with BASE=<commit> bench/gpu/pack.sh, see below)
# (probe: GpuEagerProbe, host time per eager call; nvlink: bench/gpu/nvlink_probe.cu, the bandwidth
# of each way of moving bytes between 2 GPUs, PATTERNS=1 for the copy patterns too; launch:
# bench/gpu/launch_idle_probe.cu and handshake_launch_probe.cu, host time of launches outside the
# JVM: onto an idle or a busy GPU, and lock-stepped from two threads; none is part of all)
# GPU_TEST_FILTER (an extended regex) keeps only the GPU test classes whose names match it, e.g. CrossProcess.
# SYMMEM4J_JAVA_OPTS adds JVM flags, e.g. -Dsymmem4j.cuda.pdl=false to launch kernels without
# programmatic dependent launch.
set -uo pipefail
# the repository root: two levels up from bench/gpu/, one from a copy carried inside .device/
here=$(cd "$(dirname "$0")" && pwd)
case "$here" in
  */.device) cd "$here/.." ;;
  *) cd "$here/../.." ;;
esac
what=${1:-all}
shift || true
out=${OUT:-/tmp/symmem4j-out}
mkdir -p "$out"
# NVLink multicast stays off (it can take a shared host's GPUs down): NCCL and NVSHMEM honour these.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
java=$PWD/.device/jre/bin/java
flags="--enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -Xmx24g ${SYMMEM4J_JAVA_OPTS:-}"
cp=$(ls "$PWD"/.device/lib/{symmem4j,micrometer,slf4j,picocli,jmh-core,jopt-simple,commons-math3}-*.jar | tr '\n' ':')
# cuBLAS (the tensor-parallel GEMMs) may sit off the default library path (CUDA's lib64, or PyTorch's wheel):
# found here and named to the JVM (-Dsymmem4j.cublas.library); its libcublasLt beside it through LD_LIBRARY_PATH
if ! ldconfig -p 2>/dev/null | grep -Eq 'libcublas\.so\.1[23] '; then
  cublas=$(ls /usr/local/cuda/lib64/libcublas.so.1[23] /usr/local/cuda-*/lib64/libcublas.so.1[23] \
    /usr/lib/x86_64-linux-gnu/libcublas.so.1[23] /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcublas.so.1[23] \
    /opt/*/.venv/lib/python3*/site-packages/nvidia/cublas/lib/libcublas.so.1[23] 2>/dev/null | head -1)
  if [ -n "$cublas" ]; then
    flags="$flags -Dsymmem4j.cublas.library=$cublas"
    export LD_LIBRARY_PATH="$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
echo "cuBLAS: ${cublas:-from the default library path}"
nvidia-smi -L || true
nvidia-smi topo -m 2>/dev/null | head -12 || true
echo "CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-unset} CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-unset}"
rc=0
# The GPU tests, one JVM per test class (a sticky CUDA error such as CUDA_ERROR_ILLEGAL_ADDRESS loses the
# process's contexts: it must not fail the classes after it), listed as they run (--details=verbose) in the
# log, one line per class on stdout. A test past -Dsymmem4j.test.gpuTestSeconds (GPU_TEST_SECONDS, default
# 240) is named by GpuTestWatchdog, which prints every thread's stack and halts the JVM (exit code 86).
# Backstop: after $2 s a class's JVM gets SIGQUIT (a thread dump), 30 s later SIGKILL.
gpu_test_classes() {
  (cd .device/test-classes && ls org/symmem4j/parallel/cuda/*Test.class org/symmem4j/parallel/cuda/ffi/*Test.class \
    org/symmem4j/pipeline/exec/{Cuda,Nvshmem}*Test.class \
    org/symmem4j/gradsync/*GpuTest.class org/symmem4j/state/Cuda*Test.class \
    org/symmem4j/serving/session/Cuda*Test.class) \
    | sed 's/\.class$//; s:/:.:g' | grep -E "${GPU_TEST_FILTER:-.}"
}
run_gpu_tests() { # log file, seconds per class, extra JVM flags
  local log=$1 code=0 c one
  : > "$log"
  for c in $(gpu_test_classes); do
    one=$(mktemp)
    timeout -k 30 -s QUIT "$2" $java $flags -Dsymmem4j.test.gpuTestSeconds=${GPU_TEST_SECONDS:-240} $3 \
      -Dsymmem4j.test.classPath="$PWD/.device/test-classes:$cp" \
      -jar .device/lib/junit-platform-console-standalone-*.jar execute \
      --class-path ".device/test-classes:$cp" --select-class "$c" \
      --details=verbose --disable-banner > "$one" 2>&1
    local rc1=$?
    code=$(( code | rc1 ))
    cat "$one" >> "$log"
    printf '%-70s exit=%-3s %s\n' "$c" "$rc1" "$(grep -E 'tests (successful|failed|aborted)' "$one" \
      | sed -E 's/\x1b\[[0-9;]*m//g; s/^\[ *([0-9]+) tests ([a-z]+) *\]$/\2=\1/' | tr '\n' ' ')"
    grep -E "GPU TEST HUNG: test=.*limit" "$one" | head -3
    rm -f "$one"
  done
  return $code
}
if [ "$what" = tests ] || [ "$what" = all ]; then
  run_gpu_tests "$out/gpu-tests.log" 300 "" | tee "$out/gpu-tests-summary.txt"
  rc=${PIPESTATUS[0]}
fi
if [ "$what" = shared ]; then
  # ranks sharing a GPU need a hardware queue each plus one for the host's copies (LaunchBudget
  # refuses fewer): CUDA's default of 8 is not enough for 8 ranks
  export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
  run=0
  for n in ${RANKS:-8 4 2}; do
    run=$((run + 1))
    start=$(date +%s)
    log="$out/gpu-tests-${n}ranks-run$run.log"
    echo "== $n ranks (run $run, CUDA_DEVICE_MAX_CONNECTIONS=$CUDA_DEVICE_MAX_CONNECTIONS)" | tee -a "$out/gpu-tests-summary.txt"
    run_gpu_tests "$log" "${SHARED_LIMIT:-300}" "-Dsymmem4j.test.cudaRanks=$n" | tee -a "$out/gpu-tests-summary.txt"
    code=${PIPESTATUS[0]}
    rc=$(( rc | code ))
    echo "== $n ranks: exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/gpu-tests-summary.txt"
  done
fi
if [ "$what" = nvshmem ]; then
  # the NVSHMEM transport (#18): its GPU tests (one process per GPU; the pipeline's needs 2 GPUs) and the
  # cross-process CUDA test beside them; with 2 GPUs or more the hand-off benchmark in process mode,
  # NVSHMEM's put-with-signal against ours and NCCL send/recv in the same run
  GPU_TEST_FILTER=${GPU_TEST_FILTER:-Nvshmem|CrossProcess} run_gpu_tests "$out/gpu-tests-nvshmem.log" \
    "${NVSHMEM_TEST_LIMIT:-300}" "" | tee "$out/nvshmem-summary.txt"
  rc=${PIPESTATUS[0]}
  if [ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ]; then
    timeout -k 10 "${NVSHMEM_BENCH_LIMIT:-400}" $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuHandoffBench --processes \
      --out "$out/gpu-handoff-nvshmem.md" --raw "$out/gpu-handoff-nvshmem.csv" "$@" > "$out/gpu-handoff-nvshmem.log" 2>&1
    code=$?
    rc=$(( rc | code ))
    echo "== hand-off benchmark --processes (NVSHMEM): exit=$code" | tee -a "$out/nvshmem-summary.txt"
    tail -5 "$out/gpu-handoff-nvshmem.log"
  fi
fi
if [ "$what" = hierarchical ]; then
  # a GPU group spanning pretend machines (#17): its test, then GpuHierarchicalAllReduceBench twice, NCCL on what it
  # finds between the GPUs (NVLink) and through sockets (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), RANKS_PER_MACHINE
  # GPUs per pretend machine (default 2)
  GPU_TEST_FILTER=${GPU_TEST_FILTER:-CudaHierarchical} run_gpu_tests "$out/gpu-tests-hierarchical.log" 300 "" \
    | tee "$out/hierarchical-summary.txt"
  rc=${PIPESTATUS[0]}
  for links in nvlink sockets; do
    if [ "$links" = sockets ]; then export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1; fi
    timeout -k 10 "${HIERARCHICAL_BENCH_LIMIT:-240}" $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuHierarchicalAllReduceBench \
      --ranks-per-machine "${RANKS_PER_MACHINE:-2}" --out "$out/gpu-hierarchical-$links.md" \
      --raw "$out/gpu-hierarchical-$links.csv" > "$out/gpu-hierarchical-$links.log" 2>&1
    code=$?
    rc=$(( rc | code ))
    echo "== hierarchical benchmark, NCCL over $links: exit=$code" | tee -a "$out/hierarchical-summary.txt"
  done
  unset NCCL_P2P_DISABLE NCCL_SHM_DISABLE
fi
if [ "$what" = processshare ]; then
  # #15: GPU all-reduce across SHARE_RANKS processes (default 2) sharing the machine's GPUs against as many threads
  # sharing them (correctness and the latency range only; one GPU is enough), GpuProcessAllReduceBench --share-gpus
  timeout -k 10 "${SHARE_LIMIT:-400}" $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuProcessAllReduceBench --share-gpus \
    --gpus "${SHARE_RANKS:-2}" --max-bytes "${SHARE_MAX_BYTES:-16777216}" --modes graph,eager --rounds 2 --reps 9 \
    --out "$out/gpu-process-share.md" --raw "$out/gpu-process-share.csv" "$@" > "$out/gpu-process-share.log" 2>&1
  rc=$?
  echo "== processes vs threads sharing the GPUs: exit=$rc"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuAllReduceBench --out "$out/gpu-allreduce.md" \
    --raw "$out/gpu-allreduce.csv" --thresholds "$out/gpu-thresholds.properties" "$@" 2>&1 | tee "$out/gpu-bench.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
if [ "$what" = handoff ] || [ "$what" = all ]; then
  # the hand-off's device-side waits are unbounded: a broken protocol must not hold the machine
  timeout 300 $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuHandoffBench --out "$out/gpu-handoff.md" \
    --raw "$out/gpu-handoff.csv" 2>&1 | tee "$out/gpu-handoff.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
if [ "$what" = all ]; then
  # the device tool brings back 8 files: the benchmarks' two logs (also on stdout) go into one archive, so the
  # reports, their raw CSVs, the thresholds and the test logs come back as files
  (cd "$out" && tar czf gpu-bench-logs.tar.gz gpu-bench.log gpu-handoff.log && rm -f gpu-bench.log gpu-handoff.log)
fi
if [ "$what" = multi ]; then
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  for n in ${MULTI_TEST_RANKS:-$gpus 2}; do
    [ "$n" -le "$gpus" ] || continue
    start=$(date +%s)
    echo "== GPU tests, $n ranks, one per GPU ($gpus GPUs)" | tee -a "$out/multi-summary.txt"
    run_gpu_tests "$out/gpu-tests-${n}ranks.log" "${MULTI_TEST_LIMIT:-200}" "-Dsymmem4j.test.cudaRanks=$n" \
      | tee -a "$out/multi-summary.txt"
    code=${PIPESTATUS[0]}
    rc=$(( rc | code ))
    echo "== GPU tests, $n ranks: exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/multi-summary.txt"
  done
  # MULTI_BENCH=0: the tests only (the benchmarks then run in a call of their own, e.g. the targets mode)
  [ "${MULTI_BENCH:-1}" = 0 ] && { (cd "$out" && tar czf multi-raw.tar.gz gpu-tests-*.log && rm -f gpu-tests-*.log); exit $rc; }
  for g in ${MULTI_GPUS:-$gpus 2}; do
    [ "$g" -le "$gpus" ] || { echo "== all-reduce on $g GPUs: skipped, the machine has $gpus" | tee -a "$out/multi-summary.txt"; continue; }
    start=$(date +%s)
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((g - 1))) timeout -k 10 "${MULTI_BENCH_LIMIT:-150}" $java $flags -cp "$cp" \
      org.symmem4j.benchmarks.GpuAllReduceBench --out "$out/gpu-allreduce-${g}gpus.md" \
      --raw "$out/gpu-allreduce-${g}gpus.csv" --thresholds "$out/gpu-thresholds-${g}gpus.properties" "$@" > "$out/gpu-allreduce-${g}gpus.log" 2>&1
    code=$?
    rc=$(( rc | code ))
    echo "== all-reduce on $g GPUs: exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/multi-summary.txt"
  done
  # one process per GPU against one JVM, same run (GpuProcessAllReduceBench starts the rank processes itself)
  start=$(date +%s)
  timeout -k 10 "${MULTI_PROCESS_LIMIT:-240}" $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuProcessAllReduceBench \
    --out "$out/gpu-process-allreduce-${gpus}gpus.md" --raw "$out/gpu-process-allreduce-${gpus}gpus.csv" \
    > "$out/gpu-process-allreduce-${gpus}gpus.log" 2>&1
  code=$?
  rc=$(( rc | code ))
  echo "== all-reduce, one process per GPU vs one JVM, $gpus GPUs: exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/multi-summary.txt"
  start=$(date +%s)
  timeout -k 10 "${MULTI_HANDOFF_LIMIT:-120}" $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuHandoffBench \
    --out "$out/gpu-handoff-${gpus}gpus.md" --raw "$out/gpu-handoff-${gpus}gpus.csv" > "$out/gpu-handoff-${gpus}gpus.log" 2>&1
  code=$?
  rc=$(( rc | code ))
  echo "== hand-off on $gpus GPUs: exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/multi-summary.txt"
  start=$(date +%s)
  timeout -s QUIT -k 20 "${MULTI_TP_LIMIT:-240}" $java $flags -cp "$cp" org.symmem4j.benchmarks.TensorParallelGemmBench \
    --out "$out/tp-gemm-${gpus}gpus.md" --raw "$out/tp-gemm-${gpus}gpus.csv" > "$out/tp-gemm-${gpus}gpus.log" 2>&1
  code=$?
  rc=$(( rc | code ))
  echo "== tensor-parallel GEMMs on $gpus GPUs: exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/multi-summary.txt"
  nvidia-smi topo -m > "$out/topology.txt" 2>&1
  # one archive of everything (the raw CSVs included), and beside it only the summary and the reports (the device
  # tool brings back 8 files)
  (cd "$out" && tar czf multi-raw.tar.gz gpu-tests-*.log gpu-allreduce-* gpu-thresholds-* gpu-handoff-* tp-gemm-* gpu-process-allreduce-* topology.txt \
    && rm -f gpu-tests-*.log gpu-allreduce-*.log gpu-handoff-*.log gpu-allreduce-*.csv gpu-handoff-*.csv tp-gemm-*.log \
      tp-gemm-*.csv gpu-process-allreduce-*.log gpu-process-allreduce-*.csv topology.txt)
fi
if [ "$what" = targets ]; then
  # issue #20's targets on a machine of several GPUs, benchmarks only, each past its limit stopped (SIGQUIT: a thread
  # dump into its log, then SIGKILL): TARGETS (default "allreduce process handoff") picks them, in order, from
  #   allreduce   GpuAllReduceBench, one JVM (graph-captured and eager, bf16 and fp32, against NCCL's two ways)
  #   process     GpuProcessAllReduceBench: one process per GPU against one JVM, same run
  #   handoff     GpuHandoffBench --processes: NVSHMEM's put-with-signal, ours, NCCL send/recv
  #   tp          TensorParallelGemmBench in one JVM, eager (fused vs cuBLAS + NCCL vs cuBLAS alone; the MLP block)
  #   tpgraph     TensorParallelGemmBench --processes --graph (one process per GPU, calls captured and replayed)
  # each writes <name>.md, <name>.csv and <name>.log; targets-summary.txt has exit codes and wall times
  for t in ${TARGETS:-allreduce process handoff}; do
    start=$(date +%s)
    case "$t" in
      allreduce) main=GpuAllReduceBench; args="--thresholds $out/gpu-thresholds.properties"; limit=${ALLREDUCE_LIMIT:-200} ;;
      process) main=GpuProcessAllReduceBench; args=""; limit=${PROCESS_LIMIT:-240} ;;
      handoff) main=GpuHandoffBench; args="--processes"; limit=${HANDOFF_LIMIT:-150} ;;
      tp) main=TensorParallelGemmBench; args="${TP_ARGS:-}"; limit=${TP_LIMIT:-240} ;;
      tpgraph) main=TensorParallelGemmBench; args="--processes --graph ${TP_ARGS:-}"; limit=${TP_LIMIT:-240} ;;
      *) echo "targets: unknown target $t (expected allreduce, process, handoff, tp or tpgraph)" >&2; rc=2; continue ;;
    esac
    timeout -s QUIT -k 20 "$limit" $java $flags -cp "$cp" org.symmem4j.benchmarks.$main --out "$out/$t.md" \
      --raw "$out/$t.csv" $args > "$out/$t.log" 2>&1
    code=$?
    rc=$(( rc | code ))
    echo "== $t ($main $args): exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/targets-summary.txt"
    tail -3 "$out/$t.log"
  done
  nvidia-smi topo -m > "$out/topology.txt" 2>&1
  # one archive of the logs, CSVs and thresholds (those that exist: the targets run may leave some out), beside it the
  # summary and the reports (the device tool brings back 8 files)
  (cd "$out" && files=$(ls *.log *.csv topology.txt gpu-thresholds.properties 2>/dev/null) \
    && tar czf targets-raw.tar.gz $files && rm -f $files)
fi
if [ "$what" = doctor ]; then
  # symmem4j-doctor on this machine's GPUs (#36: "under a minute on a 2-GPU machine"): its whole output, the wall time,
  # and the thresholds file it writes (DOCTOR_ARGS adds options, e.g. --gpu-sizes 1024,1048576)
  start=$(date +%s%N)
  timeout -s QUIT -k 20 "${DOCTOR_LIMIT:-180}" $java $flags -cp "$cp" org.symmem4j.benchmarks.Doctor \
    --write-thresholds "$out/doctor-thresholds.properties" ${DOCTOR_ARGS:-} 2>&1 | tee "$out/doctor.txt"
  rc=$(( rc | PIPESTATUS[0] ))
  echo "doctor wall: $(( ($(date +%s%N) - start) / 1000000 )) ms" | tee -a "$out/doctor.txt"
fi
if [ "$what" = tp ]; then
  # the tensor-parallel GEMM benchmark alone (one rank per GPU; TP_ARGS adds options, e.g. --m 8192 --mlp none);
  # past TP_LIMIT s it gets SIGQUIT (every thread's stack into the log), 20 s later SIGKILL
  timeout -s QUIT -k 20 "${TP_LIMIT:-300}" $java $flags -cp "$cp" org.symmem4j.benchmarks.TensorParallelGemmBench \
    --out "$out/tp-gemm.md" --raw "$out/tp-gemm.csv" ${TP_ARGS:-} 2>&1 | tee "$out/tp-gemm.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
if [ "$what" = nsys ]; then
  # Nsight Systems on the tensor-parallel benchmark (issue #36, docs/nvtx.md): symmem4j's NVTX ranges (domain
  # "symmem4j": collectives, the fused GEMMs by mode, the MLP block's forward/backward) above the kernels they enqueue.
  # Short by default (one GEMM shape, 3 x 10 eager calls per cell, then the MLP block) so the report stays small.
  nsys=${NSYS:-$(command -v nsys || ls -d /usr/local/cuda/bin/nsys /usr/local/cuda-*/bin/nsys \
    /opt/nvidia/nsight-systems/*/bin/nsys /opt/nvidia/nsight-systems-cli/*/bin/nsys \
    /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | tail -1)}
  if [ -z "$nsys" ] || [ ! -x "$nsys" ]; then
    echo "nsys: Nsight Systems not found (tried PATH, /usr/local/cuda*/bin, /opt/nvidia/nsight-systems*/*/bin);" \
      "fix: install it or pass NSYS=/path/to/nsys" | tee "$out/nsys-summary.txt"
    rc=2
  else
    "$nsys" --version | tee "$out/nsys-summary.txt"
    ls /usr/local/cuda/lib64/libnvtx3interop.so.1 /usr/local/cuda/lib/libnvtx3interop.so.1 2>/dev/null | tee -a "$out/nsys-summary.txt"
    timeout -s INT -k 60 "${NSYS_LIMIT:-420}" "$nsys" profile -t cuda,nvtx --sample=none --cpuctxsw=none \
      --force-overwrite=true -o "$out/tp-mlp" \
      $java $flags -cp "$cp" org.symmem4j.benchmarks.TensorParallelGemmBench --out "$out/nsys-tp-gemm.md" \
      ${NSYS_TP_ARGS:---shapes 1792x4096 --m 4096 --reps 3 --iters 10} > "$out/nsys-profile.log" 2>&1
    code=$?
    rc=$(( rc | code ))
    echo "== nsys profile: exit=$code" | tee -a "$out/nsys-summary.txt"
    grep -F 'NVTX ranges' "$out/nsys-tp-gemm.md" | tee -a "$out/nsys-summary.txt"
    tail -5 "$out/nsys-profile.log"
    if [ ! -f "$out/tp-mlp.nsys-rep" ] && [ -f "$out/tp-mlp.qdstrm" ]; then
      # the nsys Nsight Compute bundles leaves a .qdstrm when its importer cannot run (it needs libdw.so.1: package libdw1)
      importer=$(ls "$(dirname "$(dirname "$nsys")")"/linux-desktop-*/QdstrmImporter 2>/dev/null | head -1)
      [ -n "$importer" ] && "$importer" -i "$out/tp-mlp.qdstrm" >> "$out/nsys-profile.log" 2>&1 && rm -f "$out/tp-mlp.qdstrm"
      [ -f "$out/tp-mlp.nsys-rep" ] || echo "nsys: only $out/tp-mlp.qdstrm (importer ${importer:-not found}; fix: install" \
        "libdw1, or import it with Nsight Systems' QdstrmImporter elsewhere)" | tee -a "$out/nsys-summary.txt"
    fi
    if [ -f "$out/tp-mlp.nsys-rep" ]; then
      # report names of nsys 2023.3 and later, then the older ones
      ( "$nsys" stats --force-export=true --report nvtx_sum --format table "$out/tp-mlp.nsys-rep" \
        || "$nsys" stats --report nvtxsum "$out/tp-mlp.nsys-rep" ) > "$out/nsys-nvtx-sum.txt" 2>&1
      ( "$nsys" stats --report cuda_gpu_kern_sum --format table "$out/tp-mlp.nsys-rep" \
        || "$nsys" stats --report gpukernsum "$out/tp-mlp.nsys-rep" ) 2>&1 | head -40 > "$out/nsys-kern-sum.txt"
      # one MLP step (forward, then backward) drawn from the SQLite export that nsys stats left: the docs' timeline
      python3 bench/gpu/nsys_timeline.py "$out/tp-mlp.sqlite" "$out/tp-mlp-timeline.svg" \
        --range "symmem4j tp_mlp forward" --until "symmem4j tp_mlp backward" 2>&1 | tee -a "$out/nsys-summary.txt"
      gzip -f "$out/tp-mlp.sqlite"
      cat "$out/nsys-nvtx-sum.txt"
      cat "$out/nsys-kern-sum.txt"
      ls -la "$out/tp-mlp.nsys-rep" | tee -a "$out/nsys-summary.txt"
    fi
  fi
fi
if [ "$what" = tprepeat ]; then
  # The tensor-parallel benchmark's hang (bench/results/2026-11-26-gpu-4xh200.md): TP_RUNS runs (default 3) of each
  # variant in TP_VARIANTS (default "plain unordered"): plain as shipped (the fused calls' enqueue order on), unordered
  # with -Dsymmem4j.tp.enqueue.order=false (the hosts run free: the deadlock), eager with CUDA_MODULE_LOADING=EAGER,
  # nopdl with -Dsymmem4j.cuda.pdl=false (no programmatic dependent launch), conn32 with CUDA_DEVICE_MAX_CONNECTIONS=32
  # (a hardware queue per stream), on TP_GPUS GPUs (default 2), TP_ARGS added (default --reps 5 --mlp none). A run past
  # TP_LIMIT s (default 60) gets SIGQUIT (thread dump) and SIGKILL 20 s later; tp-repeat-summary.txt has each run's
  # exit code, wall time and the last cell every rank started.
  devs=$(seq -s, 0 $(( ${TP_GPUS:-2} - 1 )))
  for variant in ${TP_VARIANTS:-plain unordered}; do
    for run in $(seq 1 "${TP_RUNS:-3}"); do
      log="$out/tp-repeat-$variant-$run.log"
      extra=""
      envs="CUDA_VISIBLE_DEVICES=$devs"
      case "$variant" in
        eager) envs="$envs CUDA_MODULE_LOADING=EAGER" ;;
        unordered) extra="-Dsymmem4j.tp.enqueue.order=false" ;;
        nopdl) extra="-Dsymmem4j.cuda.pdl=false" ;;
        conn32) envs="$envs CUDA_DEVICE_MAX_CONNECTIONS=32" ;;
      esac
      start=$(date +%s)
      env $envs timeout -s QUIT -k 20 "${TP_LIMIT:-60}" $java $flags $extra -cp "$cp" \
        org.symmem4j.benchmarks.TensorParallelGemmBench --out "$out/tp-repeat-$variant-$run.md" ${TP_ARGS:---reps 5 --mlp none} \
        > "$log" 2>&1
      code=$?
      echo "== $variant run $run: exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/tp-repeat-summary.txt"
      if [ $code != 0 ]; then
        for r in $(seq 0 7); do grep "^\[rank $r\]" "$log" | tail -1; done | tee -a "$out/tp-repeat-summary.txt"
      fi
    done
  done
  (cd "$out" && tar czf tp-repeat-raw.tar.gz tp-repeat-*.log tp-repeat-*.md 2>/dev/null && rm -f tp-repeat-*.log tp-repeat-*.md)
fi
if [ "$what" = ab ]; then
  # Regression check against the base commit packed with BASE=<commit> bench/gpu/pack.sh, same machine,
  # same call, base then this, AB_ROUNDS times (default 1): the host all-reduce JMH (threads and processes,
  # AB_SIZES bytes (default 1 KiB, 64 KiB, 1 MiB, 16 MiB),
  # the three algorithms) and, unless AB_GPU=0, the GPU all-reduce benchmark (one rank per GPU, 2 sharing one GPU
  # where there is one).
  base_cp=$(ls "$PWD"/.device/base/lib/*.jar | tr '\n' ':')
  echo "base commit: $(cat .device/base/commit 2>/dev/null || echo missing)" | tee "$out/ab.txt"
  for round in $(seq 1 "${AB_ROUNDS:-1}"); do
    for side in base this; do
      # the base's process benchmark may predate the run id its peer needs (fixed with this script):
      # AB_BASE_PROCESSES=0 leaves it out
      jmh='HostAllReduceBenchmark|ProcessAllReduceBenchmark'
      if [ $side = base ]; then c=$base_cp; [ "${AB_BASE_PROCESSES:-1}" = 0 ] && jmh=HostAllReduceBenchmark; else c=$cp; fi
      (cd "$out" && timeout 300 $java -cp "$c" org.openjdk.jmh.Main "$jmh" \
        -p bytes=${AB_SIZES:-1024,65536,1048576,16777216} -wi 2 -i 3 -w 1 -r 1 -rf csv -rff "$out/jmh-$side-$round.csv" > "$out/jmh-$side-$round.log" 2>&1)
      rc=$(( rc | $? ))
      if [ "${AB_GPU:-1}" != 0 ]; then
        bench_class=org.symmem4j.benchmarks.GpuAllReduceBench
        [ $side = base ] && ! unzip -l .device/base/lib/symmem4j-benchmarks-*.jar > /dev/null 2>&1 \
          && bench_class=org.symmem4j.examples.bench.GpuAllReduceBench
        timeout 300 $java $flags -cp "$c" $bench_class --max-bytes 16777216 --reps 5 \
          --out "$out/gpu-allreduce-$side-$round.md" > "$out/gpu-allreduce-$side-$round.log" 2>&1
        rc=$(( rc | $? ))
      fi
      echo "round $round $side: done (rc so far $rc)" | tee -a "$out/ab.txt"
    done
  done
  # one archive: the device tool brings back few files
  (cd "$out" && files=$(ls jmh-* gpu-allreduce-* 2>/dev/null) && tar czf ab-raw.tar.gz $files && rm -f $files)
fi
if [ "$what" = probe ]; then
  timeout 300 $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuEagerProbe --raw "$out/gpu-eager-probe.csv" 2>&1 \
    | tee "$out/gpu-eager-probe.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
if [ "$what" = nvlink ]; then
  timeout 300 .device/nvlink_probe 2>&1 | tee "$out/nvlink-probe.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
if [ "$what" = limits ]; then
  # #38, in one call: the machine's physical limits (topology, NVLink state, bench/gpu/peer_limits.cu: copy-engine and
  # SM bandwidth per pair and all peers at once, flag latency), then our all-reduce (GpuAllReduceBench, every GPU) and
  # PyTorch's anchors (bench/gpu/torch_anchors.py: symmetric-memory one-/two-shot and NCCL, graph-captured and
  # eager; TORCH_WHAT=allreduce,tp adds the fused GEMMs) on the same GPUs. LIMITS_SKIP=ours|torch leaves one out.
  nvidia-smi topo -m > "$out/topology.txt" 2>&1
  nvidia-smi nvlink -s >> "$out/topology.txt" 2>&1
  nvidia-smi -q | grep -E 'Product Name|Driver Version|CUDA Version|Max Clocks' -A0 | sort -u >> "$out/topology.txt"
  timeout 300 .device/peer_limits "${LIMITS_MIB:-256}" > "$out/peer-limits.csv" 2> "$out/peer-limits.txt"
  rc=$(( rc | $? ))
  cat "$out/peer-limits.txt"
  if [ "${LIMITS_SKIP:-}" != ours ]; then
    timeout -s QUIT -k 20 "${ALLREDUCE_LIMIT:-240}" $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuAllReduceBench \
      --out "$out/gpu-allreduce.md" --raw "$out/gpu-allreduce.csv" "$@" > "$out/gpu-allreduce.txt" 2>&1
    code=$?; rc=$(( rc | code ))
    echo "== GpuAllReduceBench: exit=$code"; grep -E '^\|' "$out/gpu-allreduce.md" | head -60
  fi
  if [ "${LIMITS_SKIP:-}" != torch ]; then
    py=$(ls /opt/*/.venv/bin/python 2>/dev/null | head -1); py=${py:-python3}
    gpus=$(nvidia-smi -L | wc -l)
    timeout -k 20 "${TORCH_LIMIT:-300}" "$py" -m torch.distributed.run --standalone --nproc_per_node="$gpus" \
      bench/gpu/torch_anchors.py --what "${TORCH_WHAT:-allreduce}" --out "$out/torch-anchors.csv" > "$out/torch-anchors.txt" 2>&1
    code=$?; rc=$(( rc | code ))
    echo "== torch anchors ($py): exit=$code"; tail -5 "$out/torch-anchors.txt"
  fi
  # ours / the best anchor per size, dtype and mode (the issue's table), when both sides ran
  if [ -s "$out/gpu-allreduce.md" ] && [ -s "$out/torch-anchors.csv" ]; then
    python3 bench/gpu/anchor_ratio.py --anchors "$out/torch-anchors.csv" --ours "$out/gpu-allreduce.md" \
      | tee "$out/anchor-ratio.md"
  fi
fi
if [ "$what" = fsdp ]; then
  # #31, in one call: the MLP block's fully sharded training step, ours (FsdpMlpBench: fsdp = sharded, per-layer gathers
  # prefetched on a second stream, reduce-scatter, Adam on the shard; ddp = replicas, all-reduce) and PyTorch FSDP2
  # (torch_anchors.py --what fsdp: fully_shard per Linear, bf16 MixedPrecisionPolicy, Adam), same shapes, same steps, on
  # each GPU count in FSDP_GPUS (default "2 4": the counts the machine has), one rank per GPU; then fsdp-table.md (ratio
  # ours/FSDP2 of step time, of used memory and of our exact peak allocation to FSDP2's max_memory_allocated, per rank)
  # and fsdp-memory-model.md (FsdpMemoryTable: both peaks' items, computed from the shapes). FSDP_SHAPES (tokens per rank x hidden x ffn, default the
  # tensor-parallel table's), FSDP_BLOCKS (1), FSDP_WARMUP (3), FSDP_STEPS (5), FSDP_REPS (3), FSDP_LR (1e-4) go to both;
  # FSDP_SKIP=ours|torch leaves one out; each run past FSDP_LIMIT s (default 280) is stopped. Ours only: FSDP_VARIANTS
  # (default fsdp,ddp,fsdp-whole: fsdp-whole is the sharded step with layer 0's tail whole, the schedule before the
  # tail blocks, an A/B in the same call), FSDP_TAIL_CHUNKS (0: FullyShardedMlp's default, max(4, 2 x GPUs)); each cell's
  # "[rank 0] ... timeline" line (in fsdp-summary.txt) is one recorded step's head, tail and busy time per stream.
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  py=$(ls /opt/*/.venv/bin/python 2>/dev/null | head -1); py=${py:-python3}
  shapes=${FSDP_SHAPES:-8192x4096x14336,16384x4096x14336,8192x8192x28672,16384x8192x28672}
  common_blocks=${FSDP_BLOCKS:-1}
  for g in ${FSDP_GPUS:-2 4}; do
    [ "$g" -le "$gpus" ] || { echo "== fsdp on $g GPUs: skipped, the machine has $gpus" | tee -a "$out/fsdp-summary.txt"; continue; }
    devs=$(seq -s, 0 $((g - 1)))
    if [ "${FSDP_SKIP:-}" != ours ]; then
      start=$(date +%s)
      CUDA_VISIBLE_DEVICES=$devs timeout -s QUIT -k 20 "${FSDP_LIMIT:-280}" $java $flags -cp "$cp" \
        org.symmem4j.benchmarks.FsdpMlpBench --shapes "$shapes" --blocks "$common_blocks" --warmup "${FSDP_WARMUP:-3}" \
        --steps "${FSDP_STEPS:-5}" --reps "${FSDP_REPS:-3}" --lr "${FSDP_LR:-1e-4}" \
        --variants "${FSDP_VARIANTS:-fsdp,ddp,fsdp-whole}" --tail-chunks "${FSDP_TAIL_CHUNKS:-0}" \
        --out "$out/fsdp-ours-${g}gpus.md" --raw "$out/fsdp-ours-${g}gpus.csv" > "$out/fsdp-ours-${g}gpus.log" 2>&1
      code=$?; rc=$(( rc | code ))
      echo "== fsdp ours (FsdpMlpBench) on $g GPUs: exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/fsdp-summary.txt"
      grep -E '^\[rank 0\]|FAILED|Exception' "$out/fsdp-ours-${g}gpus.log" | head -40 | tee -a "$out/fsdp-summary.txt"
    fi
    if [ "${FSDP_SKIP:-}" != torch ]; then
      start=$(date +%s)
      CUDA_VISIBLE_DEVICES=$devs timeout -k 20 "${FSDP_LIMIT:-280}" "$py" -m torch.distributed.run --standalone \
        --nproc_per_node="$g" bench/gpu/torch_anchors.py --what fsdp --fsdp-shapes "$shapes" --blocks "$common_blocks" \
        --fsdp-warmup "${FSDP_WARMUP:-3}" --fsdp-steps "${FSDP_STEPS:-5}" --reps "${FSDP_REPS:-3}" --lr "${FSDP_LR:-1e-4}" \
        --fsdp-out "$out/fsdp-torch-${g}gpus.csv" > "$out/fsdp-torch-${g}gpus.log" 2>&1
      code=$?; rc=$(( rc | code ))
      echo "== fsdp torch FSDP2 ($py) on $g GPUs: exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/fsdp-summary.txt"
      grep -E '^fsdp |Error|error' "$out/fsdp-torch-${g}gpus.log" | head -20 | tee -a "$out/fsdp-summary.txt"
    fi
  done
  "$py" bench/gpu/fsdp_table.py --csv "$out/fsdp-table.csv" $(ls "$out"/fsdp-ours-*gpus.csv "$out"/fsdp-torch-*gpus.csv 2>/dev/null) \
    | tee "$out/fsdp-table.md"
  # what each side holds at its peak, computed from the shapes (one block only: FSDP2's items are the MLP block's)
  if [ "$common_blocks" = 1 ]; then
    $java $flags -cp "$cp" org.symmem4j.benchmarks.FsdpMemoryTable --shapes "$shapes" --gpus "$(echo ${FSDP_GPUS:-2 4} | tr ' ' ,)" \
      > "$out/fsdp-memory-model.md" 2>&1 || echo "== FsdpMemoryTable failed (see fsdp-memory-model.md)" | tee -a "$out/fsdp-summary.txt"
  fi
  # the device tool brings back few files: the logs, the raw CSVs and the per-run reports in one archive
  (cd "$out" && files=$(ls fsdp-ours-* fsdp-torch-* 2>/dev/null) && tar czf fsdp-raw.tar.gz $files && rm -f $files)
fi
if [ "$what" = remoteshard ]; then
  GPU_TEST_FILTER=${GPU_TEST_FILTER:-CudaDistributedTensor} run_gpu_tests "$out/gpu-tests-remoteshard.log" 300 "" \
    | tee "$out/remoteshard-summary.txt"
  rc=${PIPESTATUS[0]}
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  for g in ${REMOTE_GPUS:-2 4}; do
    [ "$g" -le "$gpus" ] || { echo "== remote-shard benchmark on $g GPUs: skipped, the machine has $gpus" \
      | tee -a "$out/remoteshard-summary.txt"; continue; }
    start=$(date +%s)
    timeout -s QUIT -k 20 "${REMOTE_LIMIT:-300}" $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuRemoteShardBench \
      --gpus "$g" --out "$out/gpu-remote-shard-${g}gpus.md" --raw "$out/gpu-remote-shard-${g}gpus.csv" "$@" \
      > "$out/gpu-remote-shard-${g}gpus.log" 2>&1
    code=$?; rc=$(( rc | code ))
    echo "== remote-shard benchmark on $g GPUs: exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/remoteshard-summary.txt"
    grep -E 'Exception|Error|^## The seed|^Met' "$out/gpu-remote-shard-${g}gpus.log" | head -10 | tee -a "$out/remoteshard-summary.txt"
  done
fi
if [ "$what" = sessions ]; then
  # RANKS (first value, default 2): the tests' ranks (-Dsymmem4j.test.cudaRanks), sharing the GPUs where they outnumber
  # them; the benchmark always runs 2 ranks, a GPU each where there are 2, else both on GPU 0 (no NCCL columns then)
  sessions_ranks=${RANKS:-2}; sessions_ranks=${sessions_ranks%% *}
  export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
  GPU_TEST_FILTER=${GPU_TEST_FILTER:-CudaDeviceSessionCache} run_gpu_tests "$out/gpu-tests-sessions.log" \
    "${SESSIONS_LIMIT:-300}" "-Dsymmem4j.test.cudaRanks=$sessions_ranks" | tee "$out/sessions-summary.txt"
  rc=${PIPESTATUS[0]}
  start=$(date +%s)
  timeout -s QUIT -k 20 "${SESSIONS_LIMIT:-300}" $java $flags -cp "$cp" org.symmem4j.benchmarks.GpuSessionCacheBench \
    --out "$out/gpu-sessions.md" "$@" > "$out/gpu-sessions.log" 2>&1
  code=$?; rc=$(( rc | code ))
  echo "== session cache benchmark (2 ranks): exit=$code wall=$(( $(date +%s) - start ))s" | tee -a "$out/sessions-summary.txt"
  grep -E 'Exception|Error|^\| ' "$out/gpu-sessions.log" | head -12 | tee -a "$out/sessions-summary.txt"
fi
if [ "$what" = launch ]; then
  timeout 300 .device/launch_idle_probe 2>&1 | tee "$out/launch-idle-probe.log"
  rc=$(( rc | PIPESTATUS[0] ))
  timeout 300 .device/handshake_launch_probe 2>&1 | tee "$out/handshake-launch-probe.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
exit $rc
