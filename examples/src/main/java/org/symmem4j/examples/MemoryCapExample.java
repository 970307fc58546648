package org.symmem4j.examples;

import java.util.List;
import java.util.Locale;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.symmem4j.dl4j.SymmemParallelWrapper;
import org.symmem4j.dl4j.WorkerMemory;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.parallel.group.ProcessGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * A model whose replica does not fit a worker's memory cap: plain data parallelism is refused before training, with
 * what it needs, what the cap leaves and the fix; ZeRO stage 3 started from the configuration trains under the same
 * cap, no process ever holding the whole model. Run one JVM per worker under the launcher, each capped:
 *
 * <pre>
 *   bin/symmem4j-run -n 2 --java -Dorg.bytedeco.javacpp.maxbytes=16m -Dsymmem4j.max.symmetric.bytes=16m \
 *       -cp ... org.symmem4j.examples.MemoryCapExample --sharding none         # refused, exit code 2
 *   ... org.symmem4j.examples.MemoryCapExample --sharding PARAMETERS           # trains
 * </pre>
 * {@code -Dorg.bytedeco.javacpp.maxbytes} caps the model state in ND4J's arrays (parameters, gradient view and updater
 * state of the model and the replica; stage 3: the updater shard), {@code -Dsymmem4j.max.symmetric.bytes} the resident
 * symmetric memory (group mode's gradient view; stage 3: the parameter and gradient blocks and the two layers
 * gathered at a time). Each rank prints what its worker holds after training, measured.
 */
public final class MemoryCapExample {

    private MemoryCapExample() {
    }

    @Command(name = "MemoryCapExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "Plain data parallelism refused under a memory cap, ZeRO stage 3"
            + " started from the configuration training under the same cap (run under symmem4j-run with the caps set).")
    static final class Flags {
        @Option(names = "--sharding", paramLabel = "STAGE", description = "none, OPTIMIZER_STATE, GRADIENTS or PARAMETERS")
        String sharding = "PARAMETERS";
        @Option(names = "--workers", paramLabel = "N", description = "worker threads when not launched (default 2)")
        int workers = 2;
        @Option(names = "--hidden", paramLabel = "H", description = "width of the MLP's hidden layers")
        int hidden = 1024;
        @Option(names = "--steps", paramLabel = "S", description = "training steps")
        int steps = 4;
        @Option(names = "--batch", paramLabel = "B", description = "examples per worker per step")
        int batch = 16;
    }

    public static void main(String[] args) {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--workers", f.workers);
            Cli.positive("--hidden", f.hidden);
            Cli.positive("--steps", f.steps);
            Cli.positive("--batch", f.batch);
            if (!f.sharding.equals("none")) {
                ZeroStage.valueOf(f.sharding);
            }
            return f;
        });
        boolean launched = System.getenv("RANK") != null;
        ProcessGroup group = launched ? ProcessGroup.fromEnvironment() : null;
        int status;
        try {
            status = train(flags, group);
        } finally {
            if (group != null) {
                group.close();
            }
        }
        System.exit(status); // ND4J leaves non-daemon threads behind
    }

    private static int train(Flags flags, ProcessGroup group) {
        SyntheticData data = new SyntheticData(64, 10, 1);
        int workers = group == null ? flags.workers : group.worldSize();
        List<DataSet> batches = data.batches(2, flags.steps * workers, flags.batch, DataType.FLOAT);
        MultiLayerConfiguration conf = DataParallelExample.mlpConfiguration(data.features(), flags.hidden, data.classes());
        SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(conf);
        if (group != null) {
            builder.group(group);
        } else {
            builder.workers(workers);
        }
        if (!flags.sharding.equals("none")) {
            builder.sharding(ZeroStage.valueOf(flags.sharding));
        }
        SymmemParallelWrapper wrapper;
        try {
            wrapper = builder.build(); // the model state is planned and checked against the caps here, before allocating
        } catch (IllegalStateException e) {
            System.out.println("refused before training: " + e.getMessage()); // (the launcher prefixes each rank's lines)
            return 2;
        }
        try (wrapper) {
            wrapper.fit(new ListIterator(batches));
            for (WorkerMemory m : wrapper.workerMemory()) {
                System.out.printf(Locale.ROOT, "worker %d holds parameters %d, gradient %d, updater state %d bytes%n",
                        m.worker(), m.paramBytes(), m.gradientBytes(), m.updaterStateBytes());
            }
            System.out.printf(Locale.ROOT, "trained %d steps with sharding=%s under the caps%n", flags.steps,
                    flags.sharding);
        }
        return 0;
    }
}
