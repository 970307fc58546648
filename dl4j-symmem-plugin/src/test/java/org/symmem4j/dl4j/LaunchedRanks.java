package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.util.ModelSerializer;
import org.symmem4j.parallel.ChildJvmFlags;
import org.symmem4j.launch.Launcher;

/**
 * The process-mode tests' side of a job: {@code symmem4j-run -n N --java} starts one JVM per rank of a worker main of
 * these test classes (the launcher's own java command and flags; this JVM's class path), and what each rank trained
 * comes back as files: a model written with {@link ModelSerializer} (parameters, running statistics, updater state,
 * counters) and every step's loss as text that reads back to the same doubles.
 */
public final class LaunchedRanks {

    private LaunchedRanks() {
    }

    /**
     * Runs {@code main} on {@code ranks} processes under the launcher and checks that every rank exited 0 and printed
     * {@code okLine + " rank=" + r} ({@link org.symmem4j.parallel.cuda.WorkerProcesses#exitWith}).
     *
     * @return the ranks' output, each line prefixed with its rank by the launcher
     */
    public static String run(int ranks, String okLine, Class<?> main, String... args) throws IOException {
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        List<String> command = new ArrayList<>(List.of("-n", Integer.toString(ranks), "--master-port",
                Integer.toString(port), "--java", "--", "-Xmx512m"));
        command.addAll(ChildJvmFlags.get());
        command.addAll(List.of("-Dsymmem4j.timeout.ms=120000", "-cp", System.getProperty("java.class.path"),
                main.getName()));
        command.addAll(List.of(args));
        Launcher.Result r = Launcher.runCapturing(command, Launcher.newJobEnvironment(System.getenv()));
        String log = r.err() + "\n" + r.out();
        assertEquals(0, r.status(), log);
        for (int rank = 0; rank < ranks; rank++) {
            assertTrue(r.out().contains(okLine + " rank=" + rank), "rank " + rank + " did not finish: " + log);
        }
        return r.out();
    }

    /** Where a rank writes what it trained in case {@code name}. */
    public static Path model(Path dir, String name, int rank) {
        return dir.resolve(name + "-rank" + rank + ".zip");
    }

    /** The rank side: {@code net} (with its updater state) and every step's loss. */
    public static void write(Path dir, String name, int rank, MultiLayerNetwork net, List<Double> losses)
            throws IOException {
        ModelSerializer.writeModel(net, model(dir, name, rank).toFile(), true);
        List<String> lines = new ArrayList<>();
        for (double loss : losses) {
            lines.add(Double.toString(loss)); // shortest text that parses back to the same double
        }
        Files.write(dir.resolve(name + "-rank" + rank + ".losses"), lines);
    }

    /** The test side: the network rank {@code rank} wrote in case {@code name}. */
    public static MultiLayerNetwork read(Path dir, String name, int rank) throws IOException {
        return ModelSerializer.restoreMultiLayerNetwork(model(dir, name, rank).toFile(), true);
    }

    /** The test side: every step's loss rank {@code rank} recorded in case {@code name}. */
    public static List<Double> losses(Path dir, String name, int rank) throws IOException {
        List<Double> losses = new ArrayList<>();
        for (String line : Files.readAllLines(dir.resolve(name + "-rank" + rank + ".losses"))) {
            losses.add(Double.parseDouble(line));
        }
        return losses;
    }
}
