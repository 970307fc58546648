package org.symmem4j.examples;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import org.symmem4j.parallel.Group;
import org.symmem4j.state.ParameterCache;
import org.symmem4j.state.SymmetricHashMap;
import org.symmem4j.state.SymmetricRingBuffer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * A parameter server on the shared-state structures, no DL4J: rank 0 keeps the model in a {@link ParameterCache}
 * and hot-swaps a new version every step; the trainers (every other rank) read it zero-copy, compute a gradient of
 * a least-squares loss toward their own target, and send it to the server through a many-to-one
 * {@link SymmetricRingBuffer}; a {@link SymmetricHashMap} counts each trainer's steps. The server applies the
 * average gradient (summed in rank order, so the run is deterministic) and at the end checks its model against
 * the same training done in float64 on one thread.
 *
 * <pre>
 *   java ... org.symmem4j.examples.ParameterServerExample [--ranks N] [--steps S] [--size P]
 *   bin/symmem4j-run -n 3 --java -cp CLASSPATH org.symmem4j.examples.ParameterServerExample
 * </pre>
 */
public final class ParameterServerExample {

    private ParameterServerExample() {
    }

    @Command(name = "ParameterServerExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Parameter server on a parameter cache, a ring buffer and a hash"
            + " map: trainers read the model zero-copy and push gradients; the result is checked against float64.")
    static final class Flags {
        @Option(names = "--ranks", paramLabel = "N", description = "ranks as threads, at least 2 (rank 0 serves);"
                + " ignored when started by a launcher")
        int ranks = 3;
        @Option(names = "--steps", paramLabel = "S", description = "training steps")
        int steps = 50;
        @Option(names = "--size", paramLabel = "P", description = "parameters (float32)")
        int size = 1024;
    }

    static final float LEARNING_RATE = 0.1f;

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            Cli.positive("--steps", flags.steps);
            Cli.positive("--size", flags.size);
            if (flags.ranks < 2) {
                throw new IllegalArgumentException("--ranks=" + flags.ranks + " expected >= 2 (a server and a trainer)");
            }
            return flags;
        });
        ExampleRanks.runAndPrintRankZero("ParameterServerExample", f.ranks, group -> run(group, f.steps, f.size),
                line -> line);
    }

    /** Trainer r's target value: its gradient of 0.5 * |w - target|^2 is w - target. */
    static float target(int rank, int i) {
        return rank + (i % 7) * 0.25f;
    }

    static String run(Group group, int steps, int size) {
        int trainers = group.worldSize() - 1;
        long bytes = 4L * size;
        int ringBytes = Integer.highestOneBit((int) Math.min(1 << 30, 8 * (bytes + 8) * 2)) * 2;
        try (ParameterCache cache = ParameterCache.create(group, 3 * (bytes + 64), 4);
             SymmetricRingBuffer gradients = SymmetricRingBuffer.manyToOne(group, 0, ringBytes);
             SymmetricHashMap stepsDone = SymmetricHashMap.create(group, 8, 8, 64)) {
            // a rank that fails aborts the group before the collective closes: its peers fail at once, naming it
            return ExampleRanks.abortingOnFailure(group, () -> group.rank() == 0
                    ? serve(group, cache, gradients, stepsDone, steps, size, trainers)
                    : train(group, cache, gradients, stepsDone, steps, size));
        }
    }

    /** A trainer's steps: read the model zero-copy, push its gradient, count the step. */
    private static String train(Group group, ParameterCache cache, SymmetricRingBuffer gradients,
                                SymmetricHashMap stepsDone, int steps, int size) {
        long bytes = 4L * size;
        MemorySegment grad = MemorySegment.ofArray(new float[size]);
        for (int step = 0; step < steps; step++) {
            ParameterCache.Entry model = awaitVersion(cache, step + 1);
            for (int i = 0; i < size; i++) {   // zero-copy read of the server's memory
                float w = model.data().getAtIndex(ValueLayout.JAVA_FLOAT, i);
                grad.setAtIndex(ValueLayout.JAVA_FLOAT, i, w - target(group.rank(), i));
            }
            if (!model.isValid()) {
                throw new IllegalStateException("model version " + model.version() + " was freed while read");
            }
            gradients.put(group.rank(), grad, 0, (int) bytes);
            stepsDone.compute(group.rank(), (cur, next) -> {
                next.set(ValueLayout.JAVA_LONG, 0, (cur == null ? 0 : cur.get(ValueLayout.JAVA_LONG, 0)) + 1);
                return true;
            });
        }
        awaitVersion(cache, steps + 1); // the server's last update; then the collective closes
        return "trainer " + group.rank() + " done";
    }

    private static ParameterCache.Entry awaitVersion(ParameterCache cache, long version) {
        long deadline = System.nanoTime() + 60_000_000_000L;
        // the version poll allocates nothing; the view is taken once the server published the version (or a newer)
        while (cache.version(0, "model") < version) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("model version " + version + " did not come within 60 s from the"
                        + " server, rank 0 (fix: see rank 0's error, or give the server more time)");
            }
            Thread.onSpinWait();
        }
        return cache.get(0, "model");
    }

    private static String serve(Group group, ParameterCache cache, SymmetricRingBuffer gradients,
                                SymmetricHashMap stepsDone, int steps, int size, int trainers) {
        float[] w = new float[size];
        double[] reference = new double[size];
        cache.put("model", MemorySegment.ofArray(w)); // version 1
        float[][] received = new float[trainers + 1][];
        for (int step = 0; step < steps; step++) {
            int got = 0;
            while (got < trainers) {
                got += gradients.take((rank, buf, off, len) ->
                        received[rank] = buf.asSlice(off, len).toArray(ValueLayout.JAVA_FLOAT), trainers);
            }
            for (int i = 0; i < size; i++) {
                float sum = 0;
                double refSum = 0;
                for (int r = 1; r <= trainers; r++) {  // rank order: deterministic
                    sum += received[r][i];
                    refSum += reference[i] - target(r, i);
                }
                w[i] -= LEARNING_RATE * sum / trainers;
                reference[i] -= LEARNING_RATE * refSum / trainers;
            }
            cache.put("model", MemorySegment.ofArray(w)); // hot swap: trainers see it with their next get
        }
        double maxError = 0;
        for (int i = 0; i < size; i++) {
            maxError = Math.max(maxError, Math.abs(w[i] - reference[i]));
        }
        if (maxError > 1e-4) {
            throw new IllegalStateException("parameter server model differs from the float64 reference: max error="
                    + maxError + " expected <= 1e-4");
        }
        MemorySegment count = MemorySegment.ofArray(new long[1]);
        for (int r = 1; r <= trainers; r++) {
            if (!stepsDone.get(r, count) || count.get(ValueLayout.JAVA_LONG, 0) != steps) {
                throw new IllegalStateException("trainer " + r + " steps=" + count.get(ValueLayout.JAVA_LONG, 0)
                        + " expected " + steps);
            }
        }
        return "parameter server: " + trainers + " trainers x " + steps + " steps x " + size
                + " parameters; model matches the float64 reference (max error " + String.format("%.2e", maxError)
                + "), every trainer counted " + steps + " steps in the shared map";
    }
}
