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
 * @param worldSize      processes in the job
 * @param localWorldSize processes on this machine
 * @param runId          the job's id
 * @param ranks          this machine's processes, by local rank
 * @param notes          what the user should know (shared GPUs, oversubscribed CPUs, no {@code taskset})
 */
record LaunchPlan(int worldSize, int localWorldSize, String runId, List<RankLaunch> ranks, List<String> notes) {

    /** The flags every JVM that runs symmem4j needs (FFM for the CUDA/NCCL bindings, the Vector API). */
    static final List<String> JVM_FLAGS = List.of("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector");
    /** As the runtime checks a run id ({@code JobIdentity.checkRunId}). */
    static final Pattern RUN_ID = Pattern.compile("[A-Za-z0-9._:@+-]{1,128}");
    /**
     * The job's variables, as the library's {@code org.symmem4j.parallel.Configuration} names them (the launcher does
     * not depend on the library at run time; {@code LaunchPlanTest} keeps the names equal).
     */
    static final String SECRET_ENV = "SYMMEM4J_SECRET";
    static final String SECRET_FILE_ENV = "SYMMEM4J_SECRET_FILE";
    static final String RUN_ID_ENV = "SYMMEM4J_RUN_ID";

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
                    + " expected --secret-file FILE (mode 0600, the same content on every machine) or "
                    + SECRET_ENV + "/" + SECRET_FILE_ENV + " in the environment");
        }
        return true;
    }

    /**
     * Plans this machine's processes.
     *
     * @param spec        what the user asked for
     * @param machine     this machine's CPUs, GPUs and {@code taskset}
     * @param env         the launcher's environment, which every process inherits
     * @param javaBin     this launcher's {@code java}, for {@link LaunchSpec#java()}
     * @param secretFile  the secret file to hand out, or null when the environment or spec carries the secret
     * @param freshRunId  the run id to use when none is given (one machine only)
     * @return the plan
     * @throws IllegalArgumentException when the request cannot be met, saying what was expected, what was found and the fix
     */
    static LaunchPlan of(LaunchSpec spec, Machine machine, Map<String, String> env, String javaBin, Path secretFile,
                         String freshRunId) {
        if (spec.command().isEmpty()) {
            throw new IllegalArgumentException("no command to start: expected the program after the options, e.g."
                    + " symmem4j-run --nproc-per-node 2 -- java -cp app.jar Main (or --java -cp app.jar Main)");
        }
        int nproc = processesPerNode(spec.nprocPerNode(), machine);
        if (spec.nnodes() < 1) {
            throw new IllegalArgumentException("--nnodes=" + spec.nnodes() + " must be >= 1");
        }
        if (spec.nodeRank() < 0 || spec.nodeRank() >= spec.nnodes()) {
            throw new IllegalArgumentException("--node-rank=" + spec.nodeRank() + " outside [0, --nnodes=" + spec.nnodes()
                    + "): give each machine its own index, 0 on the machine whose address is --master-addr");
        }
        if (spec.masterPort() < 1 || spec.masterPort() > 65535) {
            throw new IllegalArgumentException("--master-port=" + spec.masterPort() + " outside [1, 65535]");
        }
        if (spec.nnodes() > 1 && isLoopback(spec.masterAddr())) {
            throw new IllegalArgumentException("--nnodes=" + spec.nnodes() + " with --master-addr=" + spec.masterAddr()
                    + ": the other machines cannot reach a loopback address; expected node 0's address on the network"
                    + " the machines share");
        }
        String runId = runId(spec, env, freshRunId);
        if (spec.secretFile() != null && secretFile == null) {
            secretFile = spec.secretFile();
        }
        int world = spec.nnodes() * nproc;
        List<String> notes = new ArrayList<>();
        if (machine.gpus() > 0 && nproc > machine.gpus()) {
            notes.add(nproc + " processes share " + machine.gpus() + " GPU(s) (" + machine.gpuSource() + "; a process's GPU"
                    + " is LOCAL_RANK mod " + machine.gpus() + "): right for testing, not for speed");
        }
        List<List<Integer>> slices = spec.cpuBind() == LaunchSpec.CpuBind.AUTO ? slices(machine.allowedCpus(), nproc, notes)
                : null;
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
            vars.put("MASTER_PORT", Integer.toString(spec.masterPort()));
            vars.put(RUN_ID_ENV, runId);
            if (secretFile != null) {
                vars.put(SECRET_FILE_ENV, secretFile.toString());
            }
            List<Integer> cpus = slices == null ? List.of() : slices.get(local);
            if (slices != null && !ompGiven) {
                vars.put("OMP_NUM_THREADS", Integer.toString(cpus.size()));
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
        return new LaunchPlan(world, nproc, runId, ranks, notes);
    }

    private static int processesPerNode(String value, Machine machine) {
        String v = value == null ? "" : value.trim();
        if (v.equals("gpu")) {
            if (machine.gpus() == 0) {
                throw new IllegalArgumentException("--nproc-per-node gpu: no GPU found (" + machine.gpuSource()
                        + "); expected at least one, or give the number of processes");
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
        throw new IllegalArgumentException("--nproc-per-node=" + value + ": expected a number >= 1, gpu (one process per GPU)"
                + " or cpu (one per CPU)");
    }

    private static String runId(LaunchSpec spec, Map<String, String> env, String freshRunId) {
        String id = spec.runId() != null ? spec.runId() : isSet(env, RUN_ID_ENV) ? env.get(RUN_ID_ENV).trim() : null;
        if (id == null) {
            if (spec.nnodes() > 1) {
                throw new IllegalArgumentException("--nnodes=" + spec.nnodes() + " without --run-id: the launchers of the"
                        + " job's machines must give their processes the same run id; expected --run-id ID (or "
                        + RUN_ID_ENV + ") with the same value on every machine");
            }
            id = freshRunId;
        }
        if (!RUN_ID.matcher(id).matches()) {
            throw new IllegalArgumentException("run id '" + id + "': expected 1 to 128 characters of letters, digits and"
                    + " . _ : @ + -");
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
}
