#!/usr/bin/env bash
# Packs everything a GPU run needs into .device/ (git-ignored; the GPU machines have no Java and no
# network): a jlinked JDK 25 runtime, the project's jars (the kernels jar carries the CUDA fatbin,
# built here by nvcc), the GPU test classes and the JUnit console launcher. Then run it with the
# device tool:  run(command="bash .device-gpu/run.sh", carry=[".device-gpu"]) (the archive of .device/; see the end)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. bench/jdk25.sh
jdk=$(find_jdk25)

mvn -q -B -DskipTests install -pl kernels,parallel,gradsync,pipeline,benchmarks -am
# the project's version from the POM (the parent's own <version>, the first one in it), so that the
# jars named below are the main ones, never the -sources or -javadoc jars beside them
version=$(sed -n '/<parent>/,/<\/parent>/d; s:^  <version>\(.*\)</version>$:\1:p' pom.xml | head -1)
[ -n "$version" ] || { echo "pack: no <version> found in pom.xml" >&2; exit 1; }
# (grep reads the whole listing: with pipefail, grep -q quitting early would fail unzip with SIGPIPE)
unzip -l "kernels/target/symmem4j-kernels-$version.jar" | grep symmem4j.fatbin > /dev/null \
  || { echo "pack: kernels/target/symmem4j-kernels-$version.jar has no fatbin (nvcc missing here?)" >&2; exit 1; }

rm -rf .device
mkdir -p .device/lib
"$jdk/bin/jlink" --add-modules java.base,jdk.unsupported,java.management,java.logging,jdk.incubator.vector,jdk.jfr \
  --strip-debug --no-man-pages --no-header-files --output .device/jre
# examples: the benchmarks share its command-line helper (Cli)
for module in kernels parallel gradsync pipeline state serving examples benchmarks; do
  cp "$module/target/symmem4j-$module-$version.jar" .device/lib/
done
# micrometer-core for the metrics, with micrometer-commons and -observation, which its registries load (a GPU test
# that builds a SimpleMeterRegistry failed without them); SLF4J's API (symmem4j logs through it) and its simple
# backend; picocli parses the benchmarks' options; JMH and its two libraries run the host benchmarks on the machine's cores
for jar in micrometer-core micrometer-commons micrometer-observation slf4j-api slf4j-simple picocli jmh-core jopt-simple commons-math3; do
  cp "$(grep -o "[^:]*$jar-[0-9][^:]*\.jar" benchmarks/target/classpath.txt | head -1)" .device/lib/
done
cp -r parallel/target/test-classes .device/test-classes
cp -r pipeline/target/test-classes/. .device/test-classes/
cp -r gradsync/target/test-classes/. .device/test-classes/
cp -r state/target/test-classes/. .device/test-classes/
# the serving module's GPU tests only (its other tests need DL4J, which .device does not carry)
mkdir -p .device/test-classes/org/symmem4j/serving/session
cp serving/target/test-classes/org/symmem4j/serving/session/Cuda*.class .device/test-classes/org/symmem4j/serving/session/
mvn -q -B dependency:copy -Dartifact=org.junit.platform:junit-platform-console-standalone:1.11.4 \
  -DoutputDirectory="$root/.device/lib"
# PROBES=1: the standalone CUDA probes too (about 4 MB: without them .device and the tree fit the device tool's
# 64 MiB per call with room to spare)
if [ "${PROBES:-0}" = 1 ]; then
  nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  # the NVLink transfer-pattern probe (run-on-device.sh nvlink)
  "$nvcc_bin" -std=c++17 -O3 -arch=sm_90 -o .device/nvlink_probe bench/gpu/nvlink_probe.cu
  # the machine's physical limits between its GPUs, any count (run-on-device.sh limits)
  "$nvcc_bin" -std=c++17 -O3 -arch=sm_90 -o .device/peer_limits bench/gpu/peer_limits.cu
  # the launch-cost probes (run-on-device.sh launch)
  "$nvcc_bin" -std=c++17 -O3 -arch=sm_90 -o .device/launch_idle_probe bench/gpu/launch_idle_probe.cu
  "$nvcc_bin" -std=c++17 -O3 -arch=sm_90 -o .device/handshake_launch_probe bench/gpu/handshake_launch_probe.cu
  # NVSHMEM's host library outside the JVM (.device/nvshmem_probe RANK NRANKS DIR LIB, see its header)
  "$nvcc_bin" -std=c++17 -O3 -arch=sm_90 -o .device/nvshmem_probe bench/gpu/nvshmem_probe.cu -ldl
fi
# BASE=<commit>: the same jars built from that commit, in .device/base/lib, for run-on-device.sh ab (a
# regression check of this tree against the base on the same machine in the same call)
if [ -n "${BASE:-}" ]; then
  base_src=$(mktemp -d)
  git clone -q "$root" "$base_src" && git -C "$base_src" checkout -q "$BASE"
  # before the benchmarks module existed the benchmarks lived in examples
  bench_module=benchmarks; [ -d "$base_src/benchmarks" ] || bench_module=examples
  (cd "$base_src" && mvn -q -B -o -DskipTests -Dmaven.javadoc.skip=true -Dmaven.source.skip=true package \
    -pl "kernels,parallel,gradsync,pipeline,$bench_module" -am)
  mkdir -p .device/base/lib
  for module in kernels parallel gradsync pipeline "$bench_module"; do
    cp "$base_src/$module/target/symmem4j-$module-$version.jar" .device/base/lib/
  done
  for jar in micrometer-core slf4j-api slf4j-simple picocli jmh-core jopt-simple commons-math3; do
    cp "$(grep -o "[^:]*$jar-[0-9][^:]*\.jar" "$base_src/$bench_module/target/classpath.txt" | head -1)" .device/base/lib/
  done
  git -C "$base_src" rev-parse --short HEAD > .device/base/commit
  rm -rf "$base_src"
fi
du -sh .device
# the carry: .device as one xz archive (the runtime uncompressed by jlink, so that xz's window compresses its module
# image: ~3x smaller than jlink's zip), and a run.sh that unpacks it into .device/ on the machine; .device/ itself
# plus the repository outgrew the device tool's 64 MiB per call (2026-11-30: 57 MB beside 39 MB of tracked files)
rm -rf .device-gpu
mkdir -p .device-gpu
(cd .device && tar -cf - .) | xz -9 -T2 > .device-gpu/device.tar.xz
cat > .device-gpu/run.sh <<'RUN'
#!/usr/bin/env bash
# On the GPU machine, from the repository root: unpacks .device-gpu/device.tar.xz into .device/, then runs
# bench/gpu/run-on-device.sh with this script's arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .device && mkdir .device && xz -dc .device-gpu/device.tar.xz | tar -xf - -C .device
exec bash bench/gpu/run-on-device.sh "$@"
RUN
du -sh .device-gpu/device.tar.xz
echo "packed .device-gpu/ — run it with the device tool: command='bash .device-gpu/run.sh [STEP]', carry=['.device-gpu']"
echo "(or, where .device/ and the tree fit 64 MiB: command='bash bench/gpu/run-on-device.sh', carry=['.device'])"
