#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .device/ carried (see bench/gpu/pack.sh):
# the GPU tests, then the GPU all-reduce and pipeline hand-off benchmarks. Logs and reports land in $OUT.
#   run-on-device.sh [tests|bench|handoff|all|probe|nvlink|launch] [extra all-reduce benchmark args]
# (probe: GpuEagerProbe, host time per eager call; nvlink: bench/gpu/nvlink_probe.cu, the bandwidth
# of each way of moving bytes between 2 GPUs, PATTERNS=1 for the copy patterns too; launch:
# bench/gpu/launch_idle_probe.cu and handshake_launch_probe.cu, host time of launches outside the
# JVM: onto an idle or a busy GPU, and lock-stepped from two threads; none is part of all)
# SYMMEM4J_JAVA_OPTS adds JVM flags, e.g. -Dsymmem4j.cuda.pdl=false to launch kernels without
# programmatic dependent launch.
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
shift || true
out=${OUT:-/tmp/symmem4j-out}
mkdir -p "$out"
# NVLink multicast stays off (it can take a shared host's GPUs down): NCCL and NVSHMEM honour these.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
java=.device/jre/bin/java
flags="--enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector -Xmx24g ${SYMMEM4J_JAVA_OPTS:-}"
cp=$(ls .device/lib/symmem4j-*.jar .device/lib/micrometer-*.jar | tr '\n' ':')
nvidia-smi -L || true
nvidia-smi topo -m 2>/dev/null | head -12 || true
rc=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  # device-side waits are unbounded: after 420 s the JVM gets SIGQUIT (it prints every thread's stack
  # into the log and goes on), 30 s later SIGKILL; tests are listed as they run (--details=verbose)
  timeout -k 30 -s QUIT 420 $java $flags -jar .device/lib/junit-platform-console-standalone-*.jar execute \
    --class-path ".device/test-classes:$cp" --select-class org.symmem4j.parallel.cuda.CudaCollectivesTest \
    --select-class org.symmem4j.pipeline.exec.CudaPipelineExecutorTest \
    --details=verbose --disable-banner 2>&1 | tee "$out/gpu-tests.log"
  rc=${PIPESTATUS[0]}
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  $java $flags -cp "$cp" org.symmem4j.examples.bench.GpuAllReduceBench --out "$out/gpu-allreduce.md" \
    --thresholds "$out/gpu-thresholds.properties" "$@" 2>&1 | tee "$out/gpu-bench.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
if [ "$what" = handoff ] || [ "$what" = all ]; then
  # the hand-off's device-side waits are unbounded: a broken protocol must not hold the machine
  timeout 300 $java $flags -cp "$cp" org.symmem4j.examples.bench.GpuHandoffBench --out "$out/gpu-handoff.md" \
    2>&1 | tee "$out/gpu-handoff.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
if [ "$what" = probe ]; then
  timeout 300 $java $flags -cp "$cp" org.symmem4j.examples.bench.GpuEagerProbe 2>&1 | tee "$out/gpu-eager-probe.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
if [ "$what" = nvlink ]; then
  timeout 300 .device/nvlink_probe 2>&1 | tee "$out/nvlink-probe.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
if [ "$what" = launch ]; then
  timeout 300 .device/launch_idle_probe 2>&1 | tee "$out/launch-idle-probe.log"
  rc=$(( rc | PIPESTATUS[0] ))
  timeout 300 .device/handshake_launch_probe 2>&1 | tee "$out/handshake-launch-probe.log"
  rc=$(( rc | PIPESTATUS[0] ))
fi
exit $rc
