#!/usr/bin/env bash
# Runs the CPU scaling benchmark on a lent GPU machine's CPUs, from what bench/cpu-scaling/pack.sh
# packed into .device-dp/ (carried by the device tool; commands run from the sent checkout's root).
#
#   bash .device-dp/run.sh unpack-part1   first call: unpacks the JDK runtime and ND4J's native jar (split into
#                                         chunks: one call per chunk, each keeps its chunk, the last unpacks)
#   bash .device-dp/run.sh bench [STEP..] second call (carrying part2 instead of part1, while the
#                                         machine is still warm): unpacks the other jars and runs the
#                                         steps (default: main small omp1 twocore mpi)
#   bash .device-dp/run.sh unpack-part2   part2 alone, so that a later call carries only ours.tar.xz (pack.sh's
#                                         PACK_PARTS=ours: our jars) and runs `bench STEP..`
#   bash .device-dp/run.sh all [STEP..]   one call, when both parts fit in one carry
# Keep the parts in two folders (.device-dp/p1, .device-dp/p2, each with run.sh) and carry one per
# call: nothing needs to change between the calls.
#
# The bench step, in order of importance, each bounded by `timeout` so the call ends in time:
#   main     ScalingBench, mlp-medium and cnn: 1, 2, 4, 8, 16 workers, 3 repetitions
#   small    ScalingBench, mlp-small, 1 repetition
#   omp1     OMP_NUM_THREADS=1: one model alone and on the 16-worker merged batch, to compare with
#            ND4J's thread limit set from Java
#   twocore  taskset to 2 cores: the 2-core target (mlp-medium)
#   mpi      Open MPI MPI_Allreduce vs the host all-reduce at 2, 4, 8, 16 ranks (if mpicc is there)
# and, for a second run: cnn (the CNN at 8 and 16 workers with 2.5 s windows: its steps take about
# 0.4 s), small16 (mlp-small at 16 workers against ParallelWrapper), zero1 (mlp-medium at 16 workers,
# plain and ZeRO stage 1), pipeline (the DL4J pipeline trainer, 1F1B and interleaved, against the single
# model and against the machine's bound, P independent models on P cores, at 4 x 8 and 8 x 16 ranks x microbatches, a
# core per rank, and against the machine's bound for the schedule (each rank's stages alone on its core, ABAB with the
# steps, simulated; PIPELINE_SCHEDULES picks the schedules besides 1F1B), then the executor's idle time against the
# simulator: the pipeline-speed target of issues #12 and #35; $OUT/pipeline.md and .csv, $OUT/pipeline-executor.txt, the
# table against the machine's bound on stdout, < 8 minutes), zero (the ZeRO
# memory table of issue #31: plain / ZeRO-1 / 2 / 3 at 2, 4, 8, 16 workers, < 8 minutes;
# $OUT/zero-memory.md), hsdp-threads and hsdp-processes (the same with hybrid sharding, MLP and CNN, ranks as
# threads or as processes, one call each; $OUT/hsdp-*.md), serving (issue #34: the router with 8 worker threads, with 8
# worker processes and ParallelInference, an MLP and a CNN, 3 reps; $OUT/serving-processes.md, < 6 minutes),
# serving-memory (8 workers against 1 on every side, at 8 models of which 4 MLPs of 20 M parameters, 1 rep: the PSS
# split by what it holds and each JVM's CPU under load and over 10 idle seconds; then the worker processes again with
# bare worker JVMs, the before of the worker JVM defaults; $OUT/serving-memory.md, $OUT/serving-memory-bare.md,
# < 9 minutes), zb-h1 (issue #35: the DL4J pipeline with ZB-H1 against 1F1B at 4 and 8 ranks, split by measured
# times, against the same bound, < 5 minutes; $OUT/zb-h1.md and .csv), rebalance (issue #35: 1F1B at 4 and 8 ranks
# split by layers timed alone and by stage times measured in the pipeline, same run, < 5 minutes; $OUT/rebalance.md),
# sync-bn (issue #35: synchronized BatchNorm's cost per BatchNorm layer, the MLP and
# the CNN with and without it in the same run, at 4, 8 and 16 worker threads, < 4 minutes; $OUT/sync-bn-w4.md,
# -w8.md, -w16.md) and pipeline-zero (issue #35: ZeRO stage 1 on the pipeline's dp axis against the unsharded
# pipeline, step time and model bytes, dp x pp = 2 x 4 and 4 x 4 rank threads, a core per rank, and stage 3 at 2 x 4,
# < 6 minutes; $OUT/pipeline-zero-2x4.md, -4x4.md, pipeline-zero3-2x4.md) and speculative (issue #34: speculative decoding against the target alone,
# < 5 minutes; $OUT/speculative.txt) and host-inference (issue #34: DL4J's forward pass against HostNetwork, the Java
# vectorized forward over the same parameters, CNN and MLP at batch 1-32 on one thread, < 2 minutes;
# $OUT/host-inference.md) and serving-host (issue #34: the router with DL4J's forward and with the host path against
# ParallelInference, CNN and MLP, 8 and 16 workers, < 4 minutes; $OUT/serving-host.txt): e.g. `run.sh bench zero`.
# Results: $OUT/scaling.csv (every run, labelled), $OUT/main.md, $OUT/log.txt, $OUT/machine.txt,
# $OUT/symmem16.jfr, $OUT/allreduce.txt. Render a label's report here with
#   java ... ScalingBench --render-from scaling.csv --label small --machine "..." --out report.md
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
home=/root/symmem4j-dp
out=${OUT:-/tmp/symmem4j-dp-out}
mkdir -p "$home" "$out"
log="$out/log.txt"

unpack() { # $1 part
  local t0=$SECONDS
  xz -dc "$here/$1" | tar -C "$home" -xf - || { echo "unpack $1 failed" >&2; exit 1; }
  echo "unpacked $1 into $home in $((SECONDS - t0)) s" | tee -a "$log"
}

bench() {
  local steps=("$@")
  [ ${#steps[@]} -gt 0 ] || steps=(main small omp1 twocore mpi)
  [ -x "$home/jre/bin/java" ] || { echo "no runtime in $home: run 'run.sh unpack-part1' first (same warm machine)" >&2; exit 1; }
  {
    date -u; nproc; lscpu 2>/dev/null; free -g; uptime
    grep -m1 "model name" /proc/cpuinfo; grep -m1 "siblings" /proc/cpuinfo; grep -m1 "cpu cores" /proc/cpuinfo
    command -v mpirun mpicc; mpirun --version 2>/dev/null | head -2
    echo "# CPU topology (CpuTopology's input; symmem4j.affinity=physical-cores takes one thread per core first)"
    grep . /sys/devices/system/cpu/cpu*/topology/{core_id,physical_package_id,thread_siblings_list}
  } > "$out/machine.txt" 2>&1
  java=("$home/jre/bin/java" --enable-native-access=ALL-UNNAMED --add-modules=jdk.incubator.vector
        --sun-misc-unsafe-memory-access=allow -Dorg.bytedeco.javacpp.cachedir="$home/javacpp" -Xmx24g
        -cp "$home/lib/*")
  scaling=("${java[@]}" org.symmem4j.benchmarks.dl4j.ScalingBench --raw "$out/scaling.csv"
           --commit "${COMMIT:-unknown}" --batch 64)
  for step in "${steps[@]}"; do
    echo "== $step at ${SECONDS}s" | tee -a "$log"
    case $step in
      main) main ;; small) small ;; omp1) omp1 ;; twocore) twocore ;; mpi) mpi ;; cnn) cnn ;; small16) small16 ;;
      zero1) zero1 ;; pipeline) pipeline ;; zero) zero ;; hsdp-threads) hsdp threads ;; hsdp-processes) hsdp processes ;;
      serving) serving ;; serving-memory) serving_memory ;; zb-h1) zb_h1 ;; sync-bn) sync_bn ;; rebalance) rebalance ;;
      pipeline-zero) pipeline_zero ;; speculative) speculative ;; host-inference) host_inference ;;
      serving-host) serving_host ;;
      *) echo "unknown step $step" | tee -a "$log" ;;
    esac
    echo "$step exit $? at ${SECONDS}s" | tee -a "$log"
  done
  tail -5 "$out/main.md" 2>/dev/null
}

main() {
  timeout 320 "${scaling[@]}" --label main --models mlp-medium,cnn --workers 1,2,4,8,16 --compare-workers 8,16 \
    --single-threads 1,2,4,8,16 --seconds 1.0 --warmup-seconds 0.3 --reps 3 \
    --jfr mlp-medium:symmem:16 --jfr-out "$out/symmem16.jfr" --out "$out/main.md" >> "$log" 2>&1
}

small() {
  timeout 80 "${scaling[@]}" --label small --models mlp-small --workers 1,2,4,8,16 --compare-workers 2,4,8,16 \
    --single-threads 1,2,4,8,16 --seconds 1.0 --warmup-seconds 0.3 --reps 1 >> "$log" 2>&1
}

omp1() {
  OMP_NUM_THREADS=1 timeout 40 "${scaling[@]}" --label omp1 --models mlp-medium,mlp-small --modes alone,single \
    --workers 16 --compare-workers 16 --single-threads 1 --seconds 1.0 --warmup-seconds 0.3 --reps 3 >> "$log" 2>&1
}

twocore() {
  timeout 50 taskset -c 0,1 "${scaling[@]}" --label twocore --models mlp-medium \
    --modes alone,single,symmem,symmem-overlap,averaging --workers 1,2 --compare-workers 2 --single-threads 1,2 \
    --seconds 1.0 --warmup-seconds 0.3 --reps 3 >> "$log" 2>&1
}

cnn() {
  timeout 190 "${scaling[@]}" --label cnn2 --models cnn --workers 8,16 --compare-workers 8,16 --single-threads 1,16 \
    --modes alone,single,independent,symmem,symmem-overlap,averaging,shared,allreduce \
    --seconds 2.0 --warmup-seconds 0.5 --reps 3 --out "$out/cnn.md" >> "$log" 2>&1
}

small16() {
  timeout 40 "${scaling[@]}" --label small16 --models mlp-small --workers 16 --compare-workers 16 --single-threads 1 \
    --modes single,symmem,averaging,shared --seconds 1.0 --warmup-seconds 0.3 --reps 3 >> "$log" 2>&1
}

zero1() {
  timeout 30 "${scaling[@]}" --label zero1 --models mlp-medium --workers 16 --compare-workers 16 \
    --modes symmem,symmem-zero1 --seconds 1.5 --warmup-seconds 0.3 --reps 3 >> "$log" 2>&1
}

# The memory table of issue #31: each worker's model state (parameters, gradient, updater state; for ZeRO-3
# what is resident, mincore) and peak off-heap growth per worker, plain / ZeRO-1 / 2 / 3 at 2, 4, 8, 16
# workers, every run a fresh JVM (about 16 runs of 10-25 s on 16 cores); $OUT/zero-memory.md and .csv.
zero() {
  timeout 470 "${java[@]}" org.symmem4j.benchmarks.dl4j.ZeroShardingBench --workers 2,4,8,16 --reps 1 --steps 12 \
    --out "$out/zero-memory.md" --raw "$out/zero-memory.csv" --commit "${COMMIT:-unknown}" \
    --command "bench/cpu-scaling/run.sh bench zero" >> "$log" 2>&1
}

# Hybrid sharding beside plain / ZeRO-1 / 2 / 3 (issue #31's HSDP rows, the MLP and the CNN): 4 ranks as 2x2, 8 as
# 4x2 and 2x4, 16 as 8x2 and 4x4; one placement per step ($1: threads or processes, one JVM per rank through the
# launcher), so that each fits one device call (about 34 runs of 8-15 s on 16 cores); $OUT/hsdp-$1.md and .csv.
# HSDP_WORKERS (default 4,8,16), HSDP_MODELS (mlp,cnn), HSDP_SHARD_GROUPS (2,4; 0: no HSDP rows) and HSDP_LIMIT (560 s)
# narrow it to fit a shorter call; HSDP_REPS (1) repeats every cell in fresh JVMs; HSDP_CPU_BIND (auto; none: the
# processes unbound, as threads are) is the launcher's --cpu-bind; HSDP_COMM_CPU=1 (--comm-cpu) gives stage-3 and HSDP
# ranks one ND4J thread less where a rank has 2 CPUs or more, so that the communication thread has one of its own.
# Each report has a "Where the sync goes" table per model and placement (exposed gathers and reduce-scatters of stage
# 3, their counts, the least rank's ran time beside the slowest's, the communication thread's wake-up delay, the
# worker's own hook work, page faults per step) and the ZeRO-3 ÷ ZeRO-1 target line.
hsdp() {
  timeout "${HSDP_LIMIT:-560}" "${java[@]}" org.symmem4j.benchmarks.dl4j.ZeroShardingBench \
    --workers "${HSDP_WORKERS:-4,8,16}" --shard-groups "${HSDP_SHARD_GROUPS:-2,4}" --models "${HSDP_MODELS:-mlp,cnn}" \
    --placements "$1" --reps "${HSDP_REPS:-1}" --steps 20 --warmup-steps 5 --cpu-bind "${HSDP_CPU_BIND:-auto}" \
    ${HSDP_COMM_CPU:+--comm-cpu} \
    --out "$out/hsdp-$1.md" --raw "$out/hsdp-$1.csv" --commit "${COMMIT:-unknown}" \
    --command "bench/cpu-scaling/run.sh bench hsdp-$1" >> "$log" 2>&1
}

# Serving (issue #34): K = 8 worker threads, 8 worker JVMs (ProcessWorkers) and ParallelInference (BATCHED, 8 workers
# per model), an MLP and a CNN, 32 closed-loop clients; the side JVMs inherit OMP_NUM_THREADS=1 and the flags above.
serving() {
  OMP_NUM_THREADS=1 timeout 560 "${java[@]}" org.symmem4j.benchmarks.ServingProcessBench --workers 8 --models 2 \
    --clients 32 --seconds 8 --reps 3 > "$out/serving-processes.md" 2>&1
}

# The router on the host path (issue #34): ServingBench, the router with DL4J's forward, the router with the host path
# (ModelSpec.ofHostPath) and ParallelInference (BATCHED), round robin, CNN and MLP, 8 and 16 workers, 32 closed-loop
# clients; OMP_NUM_THREADS=1 on every side (< 4 minutes; $OUT/serving-host.txt)
serving_host() {
  OMP_NUM_THREADS=1 timeout 330 "${java[@]}" org.symmem4j.benchmarks.ServingBench --models cnn,mlp --workers 8,16 \
    --clients 32 --reps 2 --seconds 4 --host-path --skip-memory > "$out/serving-host.txt" 2>&1
}

# The host inference path (issue #34): DL4J's own forward (net.output) against HostNetwork over the same parameters,
# ServingBench's CNN and MLP, batch 1, 2, 4, 8, 16, 32, one thread each (OMP_NUM_THREADS=1), alternating, medians of 7.
host_inference() {
  OMP_NUM_THREADS=1 timeout 300 "${java[@]}" org.symmem4j.benchmarks.HostInferenceBench --reps 7 --min-ms 200 \
    --warmup-ms 1500 > "$out/host-inference.md" 2>&1
}

# The memory side of it: 8 models (4 MLPs of 784-4096-4096-10, 20 M parameters each, and 4 CNNs), 1 and 8 workers
# on every side, short windows: the PSS of each side at 8 workers against 1 (the router with threads, with worker
# JVMs started with WorkerJvm's defaults, ParallelInference), split by what it holds, and every JVM's CPU under load
# and idle; then the worker JVMs bare (the router's flags only), the before of those defaults.
serving_memory() {
  local m=(--compare-workers 1,8 --models 8 --mlp-hidden 4096 --clients 16 --seconds 2 --idle-seconds 10 --reps 1
           --ring-mib 8)
  OMP_NUM_THREADS=1 timeout 400 "${java[@]}" org.symmem4j.benchmarks.ServingProcessBench "${m[@]}" \
    > "$out/serving-memory.md" 2>&1
  OMP_NUM_THREADS=1 timeout 150 "${java[@]}" org.symmem4j.benchmarks.ServingProcessBench "${m[@]}" \
    --sides processes --worker-jvm bare > "$out/serving-memory-bare.md" 2>&1
}

# The pipeline against the machine's own bound (issue #35): PipelineBench at 4 and 8 ranks, a core per rank, stages split
# by measured times, a 17-layer MLP (16 hidden layers of 512: four whole layers per stage at 4 ranks, two at 8), beside
# the single model and P independent models on P cores in the same run; 2 repetitions, the report rewritten after each
# (a run cut by its limit keeps the first). The input is as wide as the hidden layers (PIPELINE_FEATURES, default 512)
# so that the first hidden layer costs what the others cost: with the 64-wide input of the runs before 2026-11-29 14:00
# it cost a third, stage 0 was 18 % (4 ranks) or 35 % (8 ranks) lighter than the others, and no split of whole layers
# could be even (PIPELINE_FEATURES=64 repeats those runs). $1: the schedules besides 1F1B; $2: the report's name. Then
# the executor alone with synthetic passes (pipeline step only). Each step < 5 minutes.
# PIPELINE_AFFINITY=cores|physical-cores (issue #35) pins each rank thread, and each thread of the bound, to a CPU of its
# own (-Dsymmem4j.affinity; PIPELINE_AFFINITY_CPUS=LIST names the CPUs, -Dsymmem4j.affinity.cpus); the reports are then
# named with the mode ($OUT/pipeline-physical-cores.md, zb-h1-physical-cores.md), so that a run without it and one with
# it on the same warm machine keep both. The report's "busy per rank" shows whether equal stages kept their ranks equally
# busy.
pipeline_bound() {
  local machine name aff=()
  machine="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores, $(free -g | awk '/^Mem:/{print $2}') GiB RAM"
  name="$2${PIPELINE_AFFINITY:+-$PIPELINE_AFFINITY}"
  [ -n "${PIPELINE_AFFINITY:-}" ] && aff+=("-Dsymmem4j.affinity=$PIPELINE_AFFINITY")
  [ -n "${PIPELINE_AFFINITY_CPUS:-}" ] && aff+=("-Dsymmem4j.affinity.cpus=$PIPELINE_AFFINITY_CPUS")
  OMP_NUM_THREADS=1 timeout "$3" "${java[@]}" "${aff[@]}" org.symmem4j.benchmarks.dl4j.PipelineBench --ranks 4,8 \
    --microbatches-per-rank 2 --features "${PIPELINE_FEATURES:-512}" --layers 16 --schedules "1f1b${1:+,$1}" --splits "${PIPELINE_SPLITS:-time}" \
    --steps 10 --warmup 3 --single-steps 4 \
    --bound-seconds 1.5 --reps 2 --out "$out/$name.md" --raw "$out/$name.csv" --commit "${COMMIT:-unknown}" \
    --machine "$machine" --command "${PIPELINE_AFFINITY:+PIPELINE_AFFINITY=$PIPELINE_AFFINITY }bench/cpu-scaling/run.sh bench $2" \
    >> "$log" 2>&1
}

# The pipeline step also measures the machine's bound for each schedule (PipelineBench --machine-bound, on by default:
# after every timed step each rank's stages run alone and at once on the rank's CPU, fed into the simulator) and prints
# the report's table against that bound and its bubble breakdown to stdout. PIPELINE_SCHEDULES: the schedules besides
# 1F1B (default interleaved; e.g. zb-h1); PIPELINE_LIMIT: the bench's time limit in seconds (default 400: with the
# bound's windows, 1F1B and one more schedule at 4 and 8 ranks, 2 repetitions, take about 5-6 minutes on 32 cores).
pipeline() {
  local name="pipeline${PIPELINE_AFFINITY:+-$PIPELINE_AFFINITY}"
  pipeline_bound "${PIPELINE_SCHEDULES-interleaved}" pipeline "${PIPELINE_LIMIT:-400}"
  echo "== $name.md: against the machine's bound for the schedule"
  md_table "$out/$name.md" "^Against the machine.s bound"
  echo "== $name.md: the bubble and where the idle time went"
  md_table "$out/$name.md" "^Bubble: the median step"
  echo "== $name.md: stages"
  md_table "$out/$name.md" "^Stages: per stage" "^- "
  {
    OMP_NUM_THREADS=1 timeout 20 "${java[@]}" org.symmem4j.benchmarks.PipelineExecutorBubbleBench --ranks 4 \
      --microbatches 8 --wait park
    OMP_NUM_THREADS=1 timeout 20 "${java[@]}" org.symmem4j.benchmarks.PipelineExecutorBubbleBench --ranks 8 \
      --microbatches 16 --forward-us 1000 --backward-us 2000 --wait spin
  } > "$out/pipeline-executor.txt" 2>&1
}

# The first block of lines that match $3 (default: a markdown table's) after the paragraph that matches $2 in the report
# $1: the summary printed to stdout.
md_table() {
  awk -v h="$2" -v l="${3:-^[|]}" '$0 ~ h {f=1; next} f && $0 ~ l {print; t=1; next} t {exit}' "$1" 2>/dev/null
}

# The split from stage times measured inside the pipeline against the split from layers timed alone (issue #35,
# InPipelineProfile): 1F1B at 4 and 8 ranks, both splits in the same run (PIPELINE_SPLITS, default time,pipeline; a
# profiling run of 3 warm + 4 measured steps per configuration before its first timed run); REBALANCE_SCHEDULES adds
# schedules besides 1F1B (e.g. zb-h1, about twice the time). $OUT/rebalance.md and .csv (-physical-cores with
# PIPELINE_AFFINITY=physical-cores), < 5 minutes.
rebalance() {
  PIPELINE_SPLITS="${PIPELINE_SPLITS:-time,pipeline}" pipeline_bound "${REBALANCE_SCHEDULES:-}" rebalance 330
}

# ZB-H1 against 1F1B (issue #35), the same way; $OUT/zb-h1.md and .csv.
zb_h1() {
  pipeline_bound zb-h1 zb-h1 300
}

# Synchronized BatchNorm's cost (issue #35, SyncBatchNormBench): per BatchNorm layer and step, the extra step time and
# collective time of syncBatchNorm(true) against the same training without it (one untimed run of each, then 3 in
# ABBA order), the MLP (C = 256) and
# the CNN (C = 16, 16x16 images), 4 BatchNorm layers each, at 4, 8 and 16 worker threads: one JVM per worker count,
# each bounded (about 40-120 s each on 16 cores); $OUT/sync-bn-w4.md, -w8.md, -w16.md.
sync_bn() {
  local w t
  for w in 4 8 16; do
    case $w in 4) t=80 ;; 8) t=95 ;; *) t=130 ;; esac
    timeout $t "${java[@]}" org.symmem4j.benchmarks.dl4j.SyncBatchNormBench --workers $w --steps 16 --warmup 4 \
      --reps 3 > "$out/sync-bn-w$w.md" 2>> "$log"
  done
}

# ZeRO stage 1 on the pipeline's dp axis (issue #35, PipelineZeroBench): step time and model bytes held of a dp x pp
# pipeline of rank threads (1F1B, one ND4J thread per rank) with and without sharding(OPTIMIZER_STATE), runs
# alternating: 2 x 4 (the default MLP, 6 x 512) and 4 x 4 (6 x 1024); $OUT/pipeline-zero-2x4.md, -4x4.md; and stage 3
# (sharding(PARAMETERS)) at 2 x 4, $OUT/pipeline-zero3-2x4.md.
# Each report ends with "Where the step goes" (PipelineStepPhases): per run the pipeline, what runs outside it on the
# caller's thread (the model's hand-overs) and per rank passes, waits and optimizer step; read with
# bench/results/2026-11-30-pipeline-zero-speed.md.
pipeline_zero() {
  OMP_NUM_THREADS=1 timeout 100 "${java[@]}" org.symmem4j.benchmarks.dl4j.PipelineZeroBench --dp 2 --pp 4 \
    --steps 24 --warmup 6 --reps 3 > "$out/pipeline-zero-2x4.md" 2>> "$log"
  OMP_NUM_THREADS=1 timeout 130 "${java[@]}" org.symmem4j.benchmarks.dl4j.PipelineZeroBench --dp 4 --pp 4 \
    --hidden 1024 --steps 24 --warmup 6 --reps 3 > "$out/pipeline-zero-4x4.md" 2>> "$log"
  # stage 3 (parameters gathered once per step per stage): $OUT/pipeline-zero3-2x4.md
  OMP_NUM_THREADS=1 timeout 100 "${java[@]}" org.symmem4j.benchmarks.dl4j.PipelineZeroBench --dp 2 --pp 4 \
    --steps 24 --warmup 6 --reps 3 --stage PARAMETERS > "$out/pipeline-zero3-2x4.md" 2>> "$log"
}

# Speculative decoding (issue #34: >= 1.5x the target alone at acceptance >= 0.7, identical outputs): the example's
# pair trained here (the draft distilled from the target), k = 2, 4, 6, one ND4J thread as a serving worker has;
# $OUT/speculative.txt. SPEC_ARGS replaces the flags.
speculative() {
  OMP_NUM_THREADS=1 timeout "${SPEC_LIMIT:-300}" "${java[@]}" org.symmem4j.benchmarks.dl4j.SpeculativeDecodingBench \
    ${SPEC_ARGS:---k 2,4,6 --tokens 200 --prompts 3 --repetitions 5 --iterations 300 --dense 1024} \
    > "$out/speculative.txt" 2>&1
}

mpi() {
  {
    timeout 30 "${java[@]}" org.symmem4j.benchmarks.dl4j.HostAllReduceScaling --ranks 2,4,8,16 \
      --sizes 65536,1048576,4194304,16777216 --seconds-per-size 0.4
    if command -v mpicc >/dev/null && command -v mpirun >/dev/null && [ -f bench/mpi/allreduce_bench.c ]; then
      mpicc -std=c11 -O3 -march=native -o /tmp/allreduce_bench bench/mpi/allreduce_bench.c
      for n in 2 4 8 16; do
        timeout 10 mpirun --allow-run-as-root --oversubscribe -np $n --mca pml ob1 --mca btl self,vader \
          /tmp/allreduce_bench --max-seconds-per-size 0.4 65536 1048576 4194304 16777216
      done
    else
      echo "no mpicc/mpirun or bench/mpi/allreduce_bench.c here: Open MPI comparison skipped"
    fi
  } > "$out/allreduce.txt" 2>&1
}

case "${1:-}" in
  unpack-part1)
    if [ -f "$here/part1.tar.xz" ]; then
      unpack part1.tar.xz
    else # part1 split by pack.sh (SPLIT_PART1=N) into chunks carried in N calls: keep each, unpack once all are here
      mkdir -p "$home/chunks"
      cp "$here"/part1.tar.xz.?? "$home/chunks/" 2>/dev/null
      want=$(cat "$here/part1.chunks" 2>/dev/null || echo 0)
      have=$(ls "$home/chunks"/part1.tar.xz.?? 2>/dev/null | wc -l)
      if [ "$want" -gt 0 ] && [ "$have" -ge "$want" ]; then
        t0=$SECONDS
        cat "$home/chunks"/part1.tar.xz.?? | xz -dc | tar -C "$home" -xf - || { echo "unpack part1 chunks failed" >&2; exit 1; }
        rm -rf "$home/chunks"
        echo "unpacked part1 ($have chunks) into $home in $((SECONDS - t0)) s" | tee -a "$log"
      else
        echo "part1: $have of $want chunks here; carry the next one and call unpack-part1 again (same warm machine)"
      fi
    fi ;;
  unpack-part2) unpack part2.tar.xz ;;
  bench) shift # part2 where it is carried (else unpacked by an earlier call), then our jars over it where carried
    [ -f "$here/part2.tar.xz" ] && unpack part2.tar.xz
    [ -f "$here/ours.tar.xz" ] && unpack ours.tar.xz
    bench "$@" ;;
  all) shift; unpack part1.tar.xz; unpack part2.tar.xz; bench "$@" ;;
  *) echo "usage: run.sh unpack-part1 | unpack-part2 | bench [STEP..] | all [STEP..]" >&2; exit 2 ;;
esac
