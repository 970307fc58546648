package org.symmem4j.launch;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * What the launcher knows of its machine: the CPUs it may run on (its own affinity, so a launcher
 * started under {@code taskset} or in a cgroup shares out only those), the GPUs, and where
 * {@code taskset} is.
 *
 * @param allowedCpus the CPUs this process may run on, ascending
 * @param gpus        the GPUs visible to processes started from here
 * @param gpuSource   how {@code gpus} was found, for messages
 * @param taskset     the {@code taskset} program, or null when it is not on the {@code PATH}
 */
record Machine(List<Integer> allowedCpus, int gpus, String gpuSource, Path taskset) {

    private static final Pattern NVIDIA_DEVICE = Pattern.compile("nvidia[0-9]+");

    Machine {
        allowedCpus = List.copyOf(allowedCpus);
        if (allowedCpus.isEmpty()) {
            throw new IllegalArgumentException("no CPU to run on: expected at least one CPU in this process's affinity"
                    + " mask (fix: start the launcher with a CPU set that is not empty, e.g. taskset -c 0-3)");
        }
    }

    /**
     * Looks at this machine.
     *
     * @param env the launcher's environment ({@code PATH}, {@code CUDA_VISIBLE_DEVICES})
     * @return the facts found
     */
    static Machine discover(Map<String, String> env) {
        return new Machine(ownCpus(), gpus(env), gpuSource(env), onPath(env.get("PATH"), "taskset"));
    }

    private static List<Integer> ownCpus() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("Cpus_allowed_list:")) {
                    return CpuList.parse(line.substring(line.indexOf(':') + 1));
                }
            }
        } catch (IOException | RuntimeException e) {
            // not Linux, or an unreadable /proc: every CPU the JVM counts
        }
        List<Integer> all = new ArrayList<>();
        for (int c = 0; c < Runtime.getRuntime().availableProcessors(); c++) {
            all.add(c);
        }
        return all;
    }

    private static int gpus(Map<String, String> env) {
        String visible = env.get("CUDA_VISIBLE_DEVICES");
        if (visible != null) {
            // CUDA stops at the first invalid entry; -1 hides every GPU
            int n = 0;
            for (String d : visible.split(",")) {
                if (d.isBlank() || d.trim().startsWith("-")) {
                    break;
                }
                n++;
            }
            return n;
        }
        try (Stream<Path> dev = Files.list(Path.of("/dev"))) {
            return (int) dev.filter(p -> NVIDIA_DEVICE.matcher(p.getFileName().toString()).matches()).count();
        } catch (IOException | RuntimeException e) {
            return 0;
        }
    }

    private static String gpuSource(Map<String, String> env) {
        return env.get("CUDA_VISIBLE_DEVICES") != null ? "CUDA_VISIBLE_DEVICES=" + env.get("CUDA_VISIBLE_DEVICES")
                : "/dev/nvidiaN device files";
    }

    /** The first executable {@code name} on {@code path}, or null. */
    static Path onPath(String path, String name) {
        if (path == null) {
            return null;
        }
        for (String dir : path.split(File.pathSeparator)) {
            if (dir.isEmpty()) {
                continue;
            }
            Path p = Path.of(dir, name);
            if (Files.isRegularFile(p) && Files.isExecutable(p)) {
                return p;
            }
        }
        return null;
    }
}
