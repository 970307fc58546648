package org.symmem4j.launch;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * The processes one launcher starts: for each local rank its command line (bound to its CPU slice)
 * and the variables it gets. Made by {@link #of}, a pure function of the request, the machine and the
 * environment, so that every rule is tested without starting anything.
 *
 * <p>Each process gets torchrun's variables ({@code RANK}, {@code LOCAL_RANK}, {@code WORLD_SIZE},
 * {@code LOCAL_WORLD_SIZE}, {@code GROUP_RANK}, {@code MASTER_ADDR}, {@code MASTER_PORT}), the job's id
 * ({@code SYMMEM4J_RUN_ID}) and secret ({@code SYMMEM4J_SECRET_FILE}, unless the environment already
 * carries {@code SYMMEM4J_SECRET} or {@code SYMMEM4J_SECRET_FILE}), and, bound to a CPU slice,
 * {@code OMP_NUM_THREADS} equal to the slice (ND4J's native threads follow it) unless set already.
 * Every GPU stays visible to every process: a process's GPU is {@code LOCAL_RANK mod GPUs} (the CUDA
 * transport's rule), and peer access and NCCL need the others visible.
 *
 * <p>A job started again after a failure ({@link LaunchSpec#maxRestarts()}) is a new <em>generation</em>
 * {@code g}: its run id is generation 0's with {@code -g<g>} appended, its store port is
 * {@code --master-port + g} (on one machine, when that port is in use, one the system chooses:
 * {@link Launcher#restartPort}), and the launcher hands it a new secret; every process gets
 * {@code SYMMEM4J_RESTART_GENERATION} and torchrun's {@code TORCHELASTIC_RESTART_COUNT} (both {@code g}) and
 * {@code TORCHELASTIC_MAX_RESTARTS}. In a job of several machines both rules are functions of generation 0's
 * values, so the launchers of a job's machines agree on them without talking (node 0's launcher checks that the
 * port is free before it starts the generation, and ends the job saying so when it is not); a new port is taken
 * because the old generation's store port may still be held (a process past its {@code SIGKILL}, a socket in
 * {@code TIME_WAIT}).
 *
 * @param worldSize      processes in the job
 * @param localWorldSize processes on this machine
 * @param runId          the job's id (this generation's)
 * @param generation     which start of the job: 0 first, g after the g-th restart
 * @param masterPort     this generation's store port
 * @param ranks          this machine's processes, by local rank
 * @param notes          what the user should know (shared GPUs, oversubscribed CPUs, no {@code taskset})
 */
record LaunchPlan(int worldSize, int localWorldSize, String runId, int generation, int masterPort, List<RankLaunch> ranks,
                  List<String> notes) {

    /**
     * The flags {@code --java} gives every JVM: native access (FFM for the CUDA/NCCL/MPI bindings, JNI for ND4J's
     * JavaCPP), the Vector API (the host reductions), {@code sun.misc.Unsafe} memory access (DL4J's JavaCPP).
     */
    static final List<String> JVM_FLAGS = List.of("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector",
            "--sun-misc-unsafe-memory-access=allow");
    /** As the runtime checks a run id ({@code JobIdentity.checkRunId}). */
    static final Pattern RUN_ID = Pattern.compile("[A-Za-z0-9._:@+-]{1,128}");
    /**
     * The job's variables, as the library's {@code org.symmem4j.parallel.Configuration} names them (the launcher does
     * not depend on the library at run time; {@code LaunchPlanTest} keeps the names equal).
     */
    static final String SECRET_ENV = "SYMMEM4J_SECRET";
    static final String SECRET_FILE_ENV = "SYMMEM4J_SECRET_FILE";
    static final String RUN_ID_ENV = "SYMMEM4J_RUN_ID";
    static final String RESTART_GENERATION_ENV = "SYMMEM4J_RESTART_GENERATION";
    /** {@code symmem4j.affinity}'s variable: each process pins itself to one CPU when it joins its group. */
    static final String AFFINITY_ENV = "SYMMEM4J_AFFINITY";
    /** {@code symmem4j.affinity.cpus}'s variable: the CPUs, local rank r on the r-th named. */
    static final String AFFINITY_CPUS_ENV = "SYMMEM4J_AFFINITY_CPUS";
    /** torchrun's names for the restart count (equal to the generation) and the most restarts. */
    static final String TORCH_RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT";
    static final String TORCH_MAX_RESTARTS_ENV = "TORCHELASTIC_MAX_RESTARTS";

    /**
     * One process.
     *
     * @param rank      its rank in the job
     * @param localRank its rank on this machine
     * @param command   the command line to start (with {@code taskset -c CPUS} in front when bound)
     * @param env       the variables set for it, on top of the launcher's environment
     * @param cpus      its CPU slice, empty when unbound
     */
    record RankLaunch(int rank, int localRank, List<String> command, Map<String, String> env, List<Integer> cpus) {
        RankLaunch {
            command = List.copyOf(command);
            env = Map.copyOf(env);
            cpus = List.copyOf(cpus);
        }
    }

    LaunchPlan {
        ranks = List.copyOf(ranks);
        notes = List.copyOf(notes);
    }

    /**
     * Whether the launcher must make a secret for the job: none given and none in the environment.
     * Only a one-machine job may have one made (other machines could not read it).
     *
     * @throws IllegalArgumentException for a job of several machines without a secret
     */
    static boolean needsGeneratedSecret(LaunchSpec spec, Map<String, String> env) {
        if (spec.secretFile() != null || isSet(env, SECRET_ENV) || isSet(env, SECRET_FILE_ENV)) {
            return false;
        }
        if (spec.nnodes() > 1) {
            throw new IllegalArgumentException("--nnodes=" + spec.nnodes() + " without a secret: every machine's processes"
                    + " must prove the same secret to rank 0's store, and one made here would not reach the others;"
                    + " expected a shared secret (fix: pass --secret-file FILE, mode 0600, the same content on"
                    + " every machine, or set "
                    + SECRET_ENV + "/" + SECRET_FILE_ENV + " in the environment)");
        }
        return true;
    }

    /** Generation 0 of the job: {@link #of(LaunchSpec, Machine, Map, String, Path, String, int)} with 0. */
    static LaunchPlan of(LaunchSpec spec, Machine machine, Map<String, String> env, String javaBin, Path secretFile,
                         String freshRunId) {
        return of(spec, machine, env, javaBin, secretFile, freshRunId, 0);
    }

    /**
     * Plans this machine's processes of one generation of the job.
     *
     * @param spec        what the user asked for
     * @param machine     this machine's CPUs, GPUs and {@code taskset}
     * @param env         the launcher's environment, which every process inherits
     * @param javaBin     this launcher's {@code java}, for {@link LaunchSpec#java()}
     * @param secretFile  the secret file to hand out, or null when the environment or spec carries the secret (which
     *                    a generation after the first must not: the old generation's secret would let its processes in)
     * @param freshRunId  the run id to use when none is given (one machine only; the same for every generation)
     * @param generation  0 for the first start, g for the g-th restart
     * @return the plan
     * @throws IllegalArgumentException when the request cannot be met, saying what was expected, what was found and the fix
     */
    static LaunchPlan of(LaunchSpec spec, Machine machine, Map<String, String> env, String javaBin, Path secretFile,
                         String freshRunId, int generation) {
        return of(spec, machine, env, javaBin, secretFile, freshRunId, generation,
                processRange(spec.nprocPerNode(), machine)[1]);
    }

    /**
     * As {@link #of(LaunchSpec, Machine, Map, String, Path, String, int)}, with {@code nproc} processes on this
     * machine: within {@code --nproc-per-node MIN:MAX} ({@link #processRange}), fewer than MAX once a slot could not
     * be refilled.
     *
     * @param nproc the processes of this generation on this machine
     * @return the plan
     * @throws IllegalArgumentException as the other {@code of}, and when {@code nproc} is outside the range asked for
     */
    static LaunchPlan of(LaunchSpec spec, Machine machine, Map<String, String> env, String javaBin, Path secretFile,
                         String freshRunId, int generation, int nproc) {
        return of(spec, machine, env, javaBin, secretFile, freshRunId, generation, nproc,
                spec.masterPort() + generation);
    }

    /**
     * As {@link #of(LaunchSpec, Machine, Map, String, Path, String, int, int)}, with this generation's store port
     * given: the launcher of a one-machine job takes a port the system chooses when {@code --master-port + g} is in
     * use ({@link Launcher#restartPort}).
     *
     * @param port this generation's store port, in [1, 65535]
     * @return the plan
     * @throws IllegalArgumentException as the other {@code of}, and for a port outside [1, 65535]
     */
    static LaunchPlan of(LaunchSpec spec, Machine machine, Map<String, String> env, String javaBin, Path secretFile,
                         String freshRunId, int generation, int nproc, int port) {
        if (port < 1 || port > 65535) {
            throw internal("generation " + generation + "'s store port " + port
                    + " outside [1, 65535]");
        }
        if (spec.command().isEmpty()) {
            throw new IllegalArgumentException("no command to start: expected the program after the options"
                    + " (fix: add it, e.g."
                    + " symmem4j-run --nproc-per-node 2 -- java -cp app.jar Main or --java -cp app.jar Main)");
        }
        int[] range = processRange(spec.nprocPerNode(), machine);
        if (nproc < range[0] || nproc > range[1]) {
            throw internal("generation " + generation + " with " + nproc + " processes:"
                    + " outside --nproc-per-node=" + spec.nprocPerNode() + " [" + range[0] + ", " + range[1] + "]");
        }
        if (range[0] < range[1]) {
            checkElastic(spec);
        }
        if (spec.elasticNodes()) {
            checkElasticNodes(spec);
        }
        if (spec.nnodes() < 1) {
            throw new IllegalArgumentException("--nnodes=" + spec.nnodes() + " must be >= 1 (the number of"
                    + " machines; fix: pass e.g. --nnodes 2, or leave it unset for 1)");
        }
        if (spec.nodeRank() < 0 || spec.nodeRank() >= spec.nnodes()) {
            throw new IllegalArgumentException("--node-rank=" + spec.nodeRank() + " outside [0, --nnodes=" + spec.nnodes()
                    + "); fix: give each machine its own index, 0 on the machine whose address is --master-addr");
        }
        if (spec.masterPort() < 1 || spec.masterPort() > 65535) {
            throw new IllegalArgumentException("--master-port=" + spec.masterPort() + " outside [1, 65535]"
                    + " (fix: pass a free TCP port, e.g. 29500, the same"
                    + " on every machine)");
        }
        if (spec.maxRestarts() < 0) {
            throw new IllegalArgumentException("--max-restarts=" + spec.maxRestarts() + " must be >= 0 (fix: pass 0 for"
                    + " no restarts, or how many times to restart a failed job, e.g. --max-restarts 3)");
        }
        if ((long) spec.masterPort() + spec.maxRestarts() > 65535) {
            throw new IllegalArgumentException("--master-port=" + spec.masterPort() + " with --max-restarts="
                    + spec.maxRestarts() + ": generation g uses port " + spec.masterPort() + " + g, past 65535; expected a"
                    + " lower --master-port or fewer restarts (fix: pass --master-port "
                    + Math.min(29500, 65535 - spec.maxRestarts()) + " or lower, or --max-restarts "
                    + (65535 - spec.masterPort()) + " or fewer)");
        }
        if (generation < 0 || generation > spec.maxRestarts()) {
            throw internal("generation " + generation + " outside [0, --max-restarts="
                    + spec.maxRestarts() + "]");
        }
        if (generation > 0 && secretFile == null) {
            throw internal("generation " + generation + " needs a secret of its own,"
                    + " found none");
        }
        if (spec.nnodes() > 1 && !spec.elasticNodes() && isLoopback(spec.masterAddr())) {
            throw new IllegalArgumentException("--nnodes=" + spec.nnodes() + " with --master-addr=" + spec.masterAddr()
                    + ": the other machines cannot reach a loopback address; expected node 0's address on the network"
                    + " the machines share (fix: pass --master-addr with that address or host name)");
        }
        String runId = generationRunId(runId(spec, env, freshRunId), generation);
        if (spec.secretFile() != null && secretFile == null) {
            secretFile = spec.secretFile();
        }
        int world = spec.nnodes() * nproc;
        List<String> notes = new ArrayList<>();
        if (machine.gpus() > 0 && nproc > machine.gpus()) {
            notes.add(nproc + " processes share " + machine.gpus() + " GPU(s) (" + machine.gpuSource() + "; a process's GPU"
                    + " is LOCAL_RANK mod " + machine.gpus() + "): right for testing, not for speed");
        }
        boolean pinned = affinity(env, machine, nproc, notes);
        List<List<Integer>> slices = spec.cpuBind() == LaunchSpec.CpuBind.AUTO && !pinned
                ? slices(machine.allowedCpus(), nproc, notes) : null;
        boolean bind = slices != null && machine.taskset() != null;
        if (slices != null && machine.taskset() == null) {
            notes.add("taskset is not on the PATH: processes are not bound to their CPU slices (install util-linux),"
                    + " but OMP_NUM_THREADS is still sized to them");
        }
        boolean ompGiven = isSet(env, "OMP_NUM_THREADS");
        if (slices != null && ompGiven) {
            notes.add("OMP_NUM_THREADS=" + env.get("OMP_NUM_THREADS") + " from the environment is kept for every process");
        }
        List<RankLaunch> ranks = new ArrayList<>(nproc);
        for (int local = 0; local < nproc; local++) {
            int rank = spec.nodeRank() * nproc + local;
            Map<String, String> vars = new LinkedHashMap<>();
            vars.put("RANK", Integer.toString(rank));
            vars.put("LOCAL_RANK", Integer.toString(local));
            vars.put("WORLD_SIZE", Integer.toString(world));
            vars.put("LOCAL_WORLD_SIZE", Integer.toString(nproc));
            vars.put("GROUP_RANK", Integer.toString(spec.nodeRank()));
            vars.put("MASTER_ADDR", spec.masterAddr());
            vars.put("MASTER_PORT", Integer.toString(port));
            vars.put(RUN_ID_ENV, runId);
            if (secretFile != null) {
                vars.put(SECRET_FILE_ENV, secretFile.toString());
                if (generation > 0 && isSet(env, SECRET_ENV)) {
                    vars.put(SECRET_ENV, ""); // blank is unset: the environment's secret would win over this generation's
                }
            }
            vars.put(RESTART_GENERATION_ENV, Integer.toString(generation));
            vars.put(TORCH_RESTART_COUNT_ENV, Integer.toString(generation));
            vars.put(TORCH_MAX_RESTARTS_ENV, Integer.toString(spec.maxRestarts()));
            List<Integer> cpus = slices == null ? List.of() : slices.get(local);
            if (slices != null && !ompGiven) {
                vars.put("OMP_NUM_THREADS", Integer.toString(cpus.size()));
            }
            if (pinned && !ompGiven) {
                vars.put("OMP_NUM_THREADS", "1"); // a process pinned to one CPU: one ND4J/OpenMP thread
            }
            List<String> command = new ArrayList<>();
            if (bind) {
                command.addAll(List.of(machine.taskset().toString(), "-c", CpuList.format(cpus)));
            }
            if (spec.java()) {
                command.add(javaBin);
                command.addAll(JVM_FLAGS);
            }
            command.addAll(spec.command());
            ranks.add(new RankLaunch(rank, local, command, vars, bind ? cpus : List.of()));
        }
        return new LaunchPlan(world, nproc, runId, generation, port, ranks, notes);
    }

    /**
     * Whether the environment asks the processes to pin themselves ({@code SYMMEM4J_AFFINITY} {@code cores} or
     * {@code physical-cores}, or {@code SYMMEM4J_AFFINITY_CPUS}): each process, inheriting the variables and this
     * launcher's CPUs, pins every thread of it to the CPU of its {@code LOCAL_RANK} when it joins its group (the
     * library's {@code RankAffinity}), so the launcher's own slices are not used. Checked here, before any process
     * starts, as far as the launcher can without the library: the mode's value, a CPU list naming only CPUs this
     * launcher may use, a CPU per process.
     *
     * @throws IllegalArgumentException naming the variable, what was found and the fix
     */
    static boolean affinity(Map<String, String> env, Machine machine, int nproc, List<String> notes) {
        String mode = isSet(env, AFFINITY_ENV) ? env.get(AFFINITY_ENV).strip() : null;
        String list = isSet(env, AFFINITY_CPUS_ENV) ? env.get(AFFINITY_CPUS_ENV).strip() : null;
        if (mode != null && !List.of("off", "cores", "physical-cores").contains(mode)) {
            throw new IllegalArgumentException(AFFINITY_ENV + "=" + mode + " expected=off, cores or physical-cores (fix:"
                    + " correct the value, or unset it)");
        }
        if ("off".equals(mode) || (mode == null && list == null)) {
            return false;
        }
        List<Integer> cpus = machine.allowedCpus();
        if (list != null) {
            cpus = CpuList.parse(list);
            for (int cpu : cpus) {
                if (!machine.allowedCpus().contains(cpu)) {
                    throw new IllegalArgumentException(AFFINITY_CPUS_ENV + "=" + list + " names cpu=" + cpu + ", which"
                            + " this launcher and its processes may not use: allowed=" + CpuList.format(machine.allowedCpus())
                            + " (fix: name CPUs of " + CpuList.format(machine.allowedCpus()) + ", or start the launcher with"
                            + " cpu " + cpu + " allowed)");
                }
            }
        }
        if (cpus.size() < nproc) {
            throw new IllegalArgumentException(nproc + " processes to pin but " + cpus.size() + " CPU(s) in "
                    + (list != null ? AFFINITY_CPUS_ENV + "=" + list : "the allowed CPUs " + CpuList.format(cpus))
                    + "; expected a CPU per process (fix: start at most " + cpus.size() + " processes, name more CPUs,"
                    + " or unset " + AFFINITY_ENV + ")");
        }
        notes.add((mode == null ? AFFINITY_CPUS_ENV + "=" + list : AFFINITY_ENV + "=" + mode) + ": each process pins"
                + " itself to one CPU when it joins its group, instead of --cpu-bind's slices");
        return true;
    }

    /** Generation g's run id: generation 0's, with {@code -g<g>} appended (the base cut so that it fits 128 characters). */
    static String generationRunId(String base, int generation) {
        if (generation == 0) {
            return base;
        }
        String suffix = "-g" + generation;
        return base.substring(0, Math.min(base.length(), 128 - suffix.length())) + suffix;
    }

    /**
     * The processes a job may run on this machine: {@code [n, n]} for a number, {@code gpu} or {@code cpu}, and
     * {@code [MIN, MAX]} for torchrun's elastic spelling {@code MIN:MAX} (as its {@code --nnodes=MIN:MAX}, for the
     * processes of this one machine): the job starts with MAX and, when a process's slot cannot be refilled (the
     * process started into it after a failure failed too), goes on with one process fewer, down to MIN.
     *
     * @param value   {@code --nproc-per-node}
     * @param machine this machine's CPUs and GPUs
     * @return {MIN, MAX}, equal unless a range was given
     * @throws IllegalArgumentException when the value is none of these, or a range is not {@code 1 <= MIN <= MAX}
     */
    static int[] processRange(String value, Machine machine) {
        String v = value == null ? "" : value.trim();
        int colon = v.indexOf(':');
        if (colon < 0) {
            int n = processesPerNode(value, machine);
            return new int[] {n, n};
        }
        int min;
        int max;
        try {
            min = Integer.parseInt(v.substring(0, colon).trim());
            max = Integer.parseInt(v.substring(colon + 1).trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--nproc-per-node=" + value + ": expected MIN:MAX, two whole numbers"
                    + " (fix: e.g. 2:4: start 4 processes, go on with fewer, down to 2, when a slot cannot be refilled)");
        }
        if (min < 1 || max < min) {
            throw new IllegalArgumentException("--nproc-per-node=" + value + ": expected MIN:MAX with 1 <= MIN <= MAX,"
                    + " found MIN=" + min + " MAX=" + max + " (fix: e.g. --nproc-per-node " + Math.max(1, Math.min(min, max))
                    + ":" + Math.max(Math.max(1, min), max) + ")");
        }
        return new int[] {min, max};
    }

    /** What an elastic {@code --nproc-per-node MIN:MAX} needs: restarts, one machine, no in-place shrink. */
    private static void checkElastic(LaunchSpec spec) {
        if (spec.maxRestarts() < 1) {
            throw new IllegalArgumentException("--nproc-per-node=" + spec.nprocPerNode() + " without --max-restarts: the"
                    + " job goes on with fewer processes only when it restarts; expected --max-restarts >= 1 (fix: add"
                    + " --max-restarts 3, or give one number)");
        }
        if (spec.nnodes() > 1) {
            throw new IllegalArgumentException("--nproc-per-node=" + spec.nprocPerNode() + " with --nnodes "
                    + spec.nnodes() + ": a range of processes is for one machine here (the machines would have to"
                    + " agree on each one's count); expected --nnodes 1, or one number per machine (fix: run on one"
                    + " machine with --nnodes 1, or pass one number, e.g. --nproc-per-node "
                    + spec.nprocPerNode().substring(spec.nprocPerNode().indexOf(':') + 1).trim() + ")");
        }
    }

    /**
     * The machines of a job: {@code [n, n]} for a number, {@code [MIN, MAX]} for torchrun's elastic
     * {@code --nnodes MIN:MAX} (the launchers meet in a rendezvous each generation, {@link NodeRendezvous}).
     *
     * @param value {@code --nnodes}
     * @return {MIN, MAX}
     * @throws IllegalArgumentException when the value is neither, or a range is not {@code 1 <= MIN <= MAX, MAX >= 2}
     */
    static int[] nodeRange(String value) {
        String v = value == null ? "" : value.strip();
        int colon = v.indexOf(':');
        try {
            if (colon < 0) {
                int n = Integer.parseInt(v);
                return new int[] {n, n};
            }
            int min = Integer.parseInt(v.substring(0, colon).strip());
            int max = Integer.parseInt(v.substring(colon + 1).strip());
            if (min < 1 || max < min || max < 2) {
                throw new IllegalArgumentException("--nnodes=" + value + ": expected MIN:MAX with 1 <= MIN <= MAX and"
                        + " MAX >= 2, found MIN=" + min + " MAX=" + max + " (fix: e.g. --nnodes 2:3, or --nnodes 1 for"
                        + " one machine)");
            }
            return new int[] {min, max};
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--nnodes=" + value + ": expected a number of machines or MIN:MAX, whole"
                    + " numbers (fix: e.g. --nnodes 2, or --nnodes 2:3 for an elastic job with --max-restarts)");
        }
    }

    /** What an elastic {@code --nnodes MIN:MAX} needs: restarts, one process count per machine. */
    static void checkElasticNodes(LaunchSpec spec) {
        String range = spec.minNodes() + ":" + spec.nnodes();
        if (spec.maxRestarts() < 1) {
            throw new IllegalArgumentException("--nnodes=" + range + " without --max-restarts: the job goes on with"
                    + " the machines it still has only when it restarts; expected --max-restarts >= 1 (fix: add"
                    + " --max-restarts 3, or give one number of machines)");
        }
        if (spec.nprocPerNode() != null && spec.nprocPerNode().contains(":")) {
            throw new IllegalArgumentException("--nproc-per-node=" + spec.nprocPerNode() + " with --nnodes=" + range
                    + ": the rendezvous counts machines, each with the same processes; expected one number per machine"
                    + " (fix: --nproc-per-node "
                    + spec.nprocPerNode().substring(spec.nprocPerNode().indexOf(':') + 1).strip() + ")");
        }
        if ((long) NodeRendezvous.port(spec) > 65535) {
            throw new IllegalArgumentException("--nnodes=" + range + " with --master-port=" + spec.masterPort()
                    + " and --max-restarts=" + spec.maxRestarts() + ": the rendezvous port, --master-port +"
                    + " --max-restarts + 1 = " + NodeRendezvous.port(spec) + ", is past 65535 (fix: a lower"
                    + " --master-port, e.g. 29500)");
        }
    }

    private static int processesPerNode(String value, Machine machine) {
        String v = value == null ? "" : value.trim();
        if (v.equals("gpu")) {
            if (machine.gpus() == 0) {
                throw new IllegalArgumentException("--nproc-per-node gpu: no GPU found (" + machine.gpuSource()
                        + "); expected at least one (fix: give the number of processes, e.g. --nproc-per-node 2)");
            }
            return machine.gpus();
        }
        if (v.equals("cpu")) {
            return machine.allowedCpus().size();
        }
        try {
            int n = Integer.parseInt(v);
            if (n >= 1) {
                return n;
            }
        } catch (NumberFormatException e) {
            // the error below
        }
        throw new IllegalArgumentException("--nproc-per-node=" + value + ": expected a number >= 1, gpu (one process per GPU),"
                + " cpu (one per CPU) or MIN:MAX (elastic, with --max-restarts); fix: e.g. --nproc-per-node 2");
    }

    private static String runId(LaunchSpec spec, Map<String, String> env, String freshRunId) {
        String id = spec.runId() != null ? spec.runId() : isSet(env, RUN_ID_ENV) ? env.get(RUN_ID_ENV).trim() : null;
        if (id == null) {
            if (spec.nnodes() > 1 || spec.elasticNodes()) {
                throw new IllegalArgumentException("--nnodes=" + spec.nnodes() + " without --run-id: the launchers of the"
                        + " job's machines must give their processes the same run id; expected one run id (fix:"
                        + " pass --run-id ID,"
                        + " or set " + RUN_ID_ENV + ", with the same value on every machine)");
            }
            id = freshRunId;
        }
        if (!RUN_ID.matcher(id).matches()) {
            throw new IllegalArgumentException("run id '" + id + "': expected 1 to 128 characters of letters, digits and"
                    + " . _ : @ + - (fix: pass e.g. --run-id job-42)");
        }
        return id;
    }

    /**
     * {@code n} contiguous slices of {@code cpus}, as equal as they come (sizes differ by one at most);
     * with more processes than CPUs every process gets one CPU, shared round-robin, and a note says so.
     */
    static List<List<Integer>> slices(List<Integer> cpus, int n, List<String> notes) {
        List<List<Integer>> out = new ArrayList<>(n);
        if (n > cpus.size()) {
            notes.add(n + " processes on " + cpus.size() + " CPU(s) (" + CpuList.format(cpus) + "): each process gets one"
                    + " CPU, shared with others");
            for (int i = 0; i < n; i++) {
                out.add(List.of(cpus.get(i % cpus.size())));
            }
            return out;
        }
        for (int i = 0; i < n; i++) {
            int from = (int) ((long) i * cpus.size() / n);
            int to = (int) ((long) (i + 1) * cpus.size() / n);
            out.add(List.copyOf(cpus.subList(from, to)));
        }
        return out;
    }

    private static boolean isSet(Map<String, String> env, String name) {
        String v = env.get(name);
        return v != null && !v.isBlank();
    }

    private static boolean isLoopback(String addr) {
        try {
            return InetAddress.getByName(addr).isLoopbackAddress();
        } catch (UnknownHostException e) {
            return false; // a name only the other machines resolve: theirs to check
        }
    }

    /**
     * An error for a broken internal invariant of the launcher: a value the launcher computes itself (a generation, its
     * port, its secret, its process count) that no command line can make wrong. The launcher runs without the
     * {@code parallel} module, so it words these here, as {@code Invariants.violated} does there.
     *
     * @param what what was expected and what was found
     * @return the exception, an {@link IllegalArgumentException} as the plan's other refusals
     */
    static IllegalArgumentException internal(String what) {
        // error-message: the one place launcher invariants are worded; it says how to report them (no fix applies)
        return new IllegalArgumentException(what + " (this is a symmem4j launcher bug, not a usage error: please report"
                + " it with this message, its stack trace and the symmem4j-run command line; CONTRIBUTING.md,"
                + " 'Reporting a bug')");
    }
}
