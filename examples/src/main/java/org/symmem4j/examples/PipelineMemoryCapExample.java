package org.symmem4j.examples;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.Locale;
import java.util.zip.CRC32;
import org.bytedeco.javacpp.Pointer;
import org.deeplearning4j.nn.conf.ComputationGraphConfiguration;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.graph.ElementWiseVertex;
import org.deeplearning4j.nn.conf.inputs.InputType;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.graph.ComputationGraph;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.deeplearning4j.nn.weights.WeightInit;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.memory.MemoryWorkspace;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.learning.config.Adam;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.ZeroStage;
import org.symmem4j.dl4j.pipeline.PipelineParallelTrainer;
import org.symmem4j.dl4j.pipeline.PipelineStageSplit;
import org.symmem4j.parallel.group.ProcessGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * A network larger than one process's memory cap, trained by a pipeline whose ranks each hold only their stage: one
 * JVM per rank under the launcher, each capped, the trainer started from the configuration
 * ({@code PipelineParallelTrainer.builder(conf)}), so no process ever holds the whole network:
 *
 * <pre>
 *   bin/symmem4j-run -n 4 --java -Xms128m -Xmx128m -XX:+AlwaysPreTouch -Dorg.bytedeco.javacpp.maxphysicalbytes=512m \
 *       -cp ... org.symmem4j.examples.PipelineMemoryCapExample                 # 4 ranks, each its stage: trains
 *   java ... -Dorg.bytedeco.javacpp.maxphysicalbytes=512m ... PipelineMemoryCapExample --mode whole   # the control
 * </pre>
 * The cap that binds ND4J's arrays on the CPU is JavaCPP's {@code maxphysicalbytes}: the process's resident set
 * (heap, code, libraries and ND4J's arrays), checked by JavaCPP at every allocation it tracks, which throws its
 * {@code OutOfMemoryError} above it. {@code maxbytes} does not bind there: ND4J's CPU backend allocates its arrays'
 * memory without JavaCPP counting it ({@code Pointer.totalBytes()} grows by 16 bytes per array, whatever its size).
 *
 * <p>Without the launcher, {@code --mode pipeline} trains the same pipeline on {@code --ranks} threads of this JVM
 * (thread mode: every stage in one process), the reference the processes equal bitwise; {@code --mode whole} builds
 * the whole network as one DL4J model ({@code new MultiLayerNetwork(conf).init()}) and trains it, the control that
 * a capped JVM cannot hold. Every run prints, per stage it trains, the CRC-32 of the stage's trained parameters
 * ({@code trainer.stageParameters(s)}: no rank gathers the network) and every step's loss as its bits, and, per
 * process, the model state its trainer holds against the stage's share of the whole, the ND4J workspaces of the
 * training thread, and its resident bytes (JavaCPP's {@code Pointer.physicalBytes()}) before, after build and after
 * training. With {@code --dp D --sharding Z} the pipeline has D data-parallel replicas (launched: a world of D x
 * pipeline ranks) with ZeRO stage Z on the dp axis, and the share a rank is expected to hold is cut accordingly
 * ({@code PARAMETERS}: 4/D of its stages' elements between steps; stage CRCs are then printed in thread mode only).
 *
 * <p>{@code --model residual} trains a {@code ComputationGraph} with residual connections of the same layers and
 * parameter count instead ({@link #residualConfiguration}: blocks of two dense layers whose input is added to their
 * output), from its configuration ({@code PipelineParallelTrainer.builder(ComputationGraphConfiguration)}); the
 * control then builds it as {@code new ComputationGraph(conf).init()}.
 */
public final class PipelineMemoryCapExample {

    /** Exit status of the control when JavaCPP refuses an allocation above the cap. */
    static final int CAPPED = 3;

    private PipelineMemoryCapExample() {
    }

    @Command(name = "PipelineMemoryCapExample", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            showDefaultValues = true, description = "A network larger than one JVM's memory cap, trained by a pipeline"
            + " whose ranks hold only their stages (run under symmem4j-run with -Dorg.bytedeco.javacpp.maxphysicalbytes"
            + " set), the thread-mode reference, or the whole network in one JVM (--mode whole, the control).")
    static final class Flags {
        @Option(names = "--mode", paramLabel = "MODE", description = "pipeline (processes under the launcher, threads"
                + " without) or whole (one DL4J model of the whole network)")
        String mode = "pipeline";
        @Option(names = "--ranks", paramLabel = "P", description = "pipeline ranks when not launched (thread mode),"
                + " and the stages the whole model's report is cut into")
        int ranks = 4;
        @Option(names = "--inputs", paramLabel = "N", description = "features per example")
        int inputs = 2048;
        @Option(names = "--hidden", paramLabel = "H", description = "width of the hidden layers")
        int hidden = 2048;
        @Option(names = "--layers", paramLabel = "L", description = "hidden layers")
        int layers = 8;
        @Option(names = "--steps", paramLabel = "S", description = "training steps")
        int steps = 3;
        @Option(names = "--batch", paramLabel = "B", description = "examples per step")
        int batch = 32;
        @Option(names = "--microbatches", paramLabel = "M", description = "microbatches per step")
        int microbatches = 4;
        @Option(names = "--dp", paramLabel = "D", description = "data-parallel replicas of the pipeline (launched:"
                + " the world is D x pipeline ranks)")
        int dp = 1;
        @Option(names = "--sharding", paramLabel = "Z", description = "ZeRO on the dp axis: OPTIMIZER_STATE, GRADIENTS"
                + " or PARAMETERS (stage 3: a rank holds 1/D of its stages' parameters, gradients and state between"
                + " steps); needs --dp 2 or more")
        ZeroStage sharding;
        @Option(names = "--model", paramLabel = "KIND", description = "chain (a MultiLayerNetwork of dense layers) or"
                + " residual (a ComputationGraph of the same dense layers in residual blocks of two: needs --inputs equal"
                + " to --hidden and an even --layers)")
        String model = "chain";
        @Option(names = "--memory-detail", description = "print where the resident memory is, by what holds it, at"
                + " each phase (ResidentMemory), and after a garbage collection and a malloc_trim once trained")
        boolean memoryDetail;
    }

    /** The network: {@code layers} dense layers of width {@code hidden} and a softmax output of 16 classes, Adam. */
    static MultiLayerConfiguration configuration(int inputs, int hidden, int layers) {
        NeuralNetConfiguration.ListBuilder list = new NeuralNetConfiguration.Builder()
                .seed(2026).dataType(DataType.FLOAT).updater(new Adam(1e-3)).weightInit(WeightInit.XAVIER).list();
        for (int l = 0; l < layers; l++) {
            list.layer(new DenseLayer.Builder().nIn(l == 0 ? inputs : hidden).nOut(hidden).activation(Activation.RELU)
                    .build());
        }
        return list.layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(hidden).nOut(16)
                .activation(Activation.SOFTMAX).build()).build();
    }

    /**
     * The residual graph: {@code layers / 2} blocks, each {@code x -> dense(relu) -> dense(identity) -> add(x)}, of
     * width {@code hidden}, and a softmax output of 16 classes, Adam: the dense layers and parameter count of
     * {@link #configuration} with {@code inputs == hidden}. The network input is the first block's skip, so every block
     * is a stage the pipeline may cut at (its stages start at cut vertices only: after each add).
     */
    static ComputationGraphConfiguration residualConfiguration(int inputs, int hidden, int layers) {
        if (inputs != hidden || layers % 2 != 0) {
            throw new IllegalArgumentException("--model residual with --inputs=" + inputs + " --hidden=" + hidden
                    + " --layers=" + layers + ": expected --inputs equal to --hidden (the first block adds the input to"
                    + " its output) and an even --layers (blocks of two) (fix: e.g. --inputs " + hidden + " --layers "
                    + (layers + layers % 2) + ")");
        }
        ComputationGraphConfiguration.GraphBuilder graph = new NeuralNetConfiguration.Builder()
                .seed(2026).dataType(DataType.FLOAT).updater(new Adam(1e-3)).weightInit(WeightInit.XAVIER)
                .graphBuilder().addInputs("in");
        String skip = "in";
        for (int b = 0; b < layers / 2; b++) {
            graph.addLayer("a" + b, new DenseLayer.Builder().nIn(hidden).nOut(hidden).activation(Activation.RELU)
                    .build(), skip);
            graph.addLayer("b" + b, new DenseLayer.Builder().nIn(hidden).nOut(hidden).activation(Activation.IDENTITY)
                    .build(), "a" + b);
            graph.addVertex("add" + b, new ElementWiseVertex(ElementWiseVertex.Op.Add), skip, "b" + b);
            skip = "add" + b;
        }
        return graph.addLayer("out", new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(hidden).nOut(16)
                .activation(Activation.SOFTMAX).build(), skip).setOutputs("out")
                .setInputTypes(InputType.feedForward(inputs)).build();
    }

    /** The pipeline's builder of the model {@code --model} names, started from its configuration. */
    private static org.symmem4j.dl4j.pipeline.PipelineParallelTrainerBuilder builder(Flags flags) {
        return flags.model.equals("residual")
                ? PipelineParallelTrainer.builder(residualConfiguration(flags.inputs, flags.hidden, flags.layers))
                : PipelineParallelTrainer.builder(configuration(flags.inputs, flags.hidden, flags.layers));
    }

    public static void main(String[] args) {
        Flags flags = Cli.parse(new Flags(), args, f -> {
            Cli.positive("--ranks", f.ranks);
            Cli.positive("--inputs", f.inputs);
            Cli.positive("--hidden", f.hidden);
            Cli.positive("--layers", f.layers);
            Cli.positive("--steps", f.steps);
            Cli.positive("--batch", f.batch);
            Cli.positive("--microbatches", f.microbatches);
            Cli.positive("--dp", f.dp);
            if (!f.mode.equals("pipeline") && !f.mode.equals("whole")) {
                throw new IllegalArgumentException("--mode=" + f.mode + ": expected pipeline or whole (fix: --mode"
                        + " pipeline to train the stages, --mode whole for the one-model control)");
            }
            if (f.mode.equals("whole") && System.getenv("RANK") != null) {
                throw new IllegalArgumentException("--mode whole under a launcher (RANK is set): expected one JVM (fix:"
                        + " run the control without symmem4j-run)");
            }
            if (!f.model.equals("chain") && !f.model.equals("residual")) {
                throw new IllegalArgumentException("--model=" + f.model + ": expected chain or residual (fix: --model"
                        + " chain for the MultiLayerNetwork, --model residual for the graph with residual blocks)");
            }
            if (f.model.equals("residual")) {
                residualConfiguration(f.inputs, f.hidden, f.layers); // refuses widths and depths it cannot build
            }
            if (f.batch % f.microbatches != 0) {
                throw new IllegalArgumentException("--batch=" + f.batch + " --microbatches=" + f.microbatches
                        + ": expected a batch that the microbatches divide (fix: a multiple of " + f.microbatches + ")");
            }
            return f;
        });
        boolean launched = System.getenv("RANK") != null;
        Nd4j.create(DataType.FLOAT, 1); // loads ND4J's backend, so the first resident count includes it
        long before = Pointer.physicalBytes();
        detail(flags, launched ? "rank " + System.getenv("RANK") : flags.mode.equals("whole") ? "whole" : "threads",
                "start");
        int status;
        try (ProcessGroup group = launched ? ProcessGroup.fromEnvironment() : null) {
            status = flags.mode.equals("whole") ? whole(flags, before) : pipeline(flags, group, before);
        }
        System.exit(status); // ND4J leaves non-daemon threads behind
    }

    private static List<DataSet> data(Flags flags) {
        return new SyntheticData(flags.inputs, 16, 7).batches(11, flags.steps, flags.batch, DataType.FLOAT);
    }

    private static int pipeline(Flags flags, ProcessGroup group, long before) {
        String who = group == null ? "threads" : "rank " + group.rank();
        detail(flags, who, "group");
        try (PipelineParallelTrainer trainer = (group == null ? builder(flags).ranks(flags.ranks)
                : builder(flags).group(group)).microbatches(flags.microbatches)
                .dataParallel(flags.dp).sharding(flags.sharding).build()) {
            long built = Pointer.physicalBytes();
            detail(flags, who, "built");
            int step = 0;
            for (DataSet batch : data(flags)) {
                trainer.fit(batch);
                System.out.printf(Locale.ROOT, "step %d loss=%016x (%.9f)%n", step,
                        Double.doubleToRawLongBits(trainer.lastStep().loss()), trainer.lastStep().loss());
                detail(flags, who, "step " + step++);
            }
            long trained = Pointer.physicalBytes();
            if (flags.memoryDetail) {
                System.gc(); // arrays no longer referenced free their memory once collected (ND4J's deallocator)
                sleep();
                detail(flags, who, "after gc");
                org.symmem4j.parallel.memory.MallocHeap.trim();
                detail(flags, who, "after malloc_trim");
            }
            PipelineStageSplit split = trainer.split();
            long whole = 0;
            for (int s = 0; s < split.stageCount(); s++) {
                whole += split.parameterCount(s);
            }
            int ranks = group == null ? split.stageCount() : group.worldSize() / flags.dp;
            // stage 3 in group mode: a rank holds only its blocks between steps, so no stage CRC without a gather
            boolean crcs = group == null || flags.sharding != ZeroStage.PARAMETERS;
            for (int s = 0; s < split.stageCount(); s++) {
                if (crcs && (group == null || s % ranks == group.rank() % ranks)) {
                    System.out.printf(Locale.ROOT, "stage %d layers %d-%d parameters %d crc32=%08x%n", s,
                            split.firstLayer(s), split.endLayer(s) - 1, split.parameterCount(s),
                            crc32(trainer.stageParameters(s)));
                }
            }
            long held = trainer.parametersHeld();
            // parameters, gradient view, accumulated gradient and Adam's two states of the whole network, 4-byte floats,
            // of every replica this process runs (thread mode: all D); with ZeRO on the dp axis each replica's share of
            // the elements it cuts over the D replicas: stage 1-2 the two states, stage 3 (between steps) all but the
            // accumulated gradient, which it gives back
            int replicasHere = group == null ? flags.dp : 1;
            double perElement = flags.sharding == null ? 5
                    : flags.sharding == ZeroStage.PARAMETERS ? 4.0 / flags.dp : 3 + 2.0 / flags.dp;
            long wholeState = Math.round(perElement * whole * 4 * replicasHere);
            double share = (double) held / whole;
            System.out.printf(Locale.ROOT, "%s holds parameters %d of %d (share %.4f) modelBytesHeld %d, share of the"
                    + " whole's %d: %d (%+.2f %%)%n", who, held, whole, share, trainer.modelBytesHeld(), wholeState,
                    Math.round(share * wholeState), 100.0 * (trainer.modelBytesHeld() - share * wholeState)
                    / (share * wholeState));
            report(who, before, built, trained);
        }
        return 0;
    }

    private static int whole(Flags flags, long before) {
        try {
            // one DL4J model of the whole network: DL4J's init() and fit, of the network or of the graph
            org.deeplearning4j.nn.api.Model net;
            java.util.function.Consumer<DataSet> fit;
            java.util.function.Supplier<INDArray> state;
            if (flags.model.equals("residual")) {
                ComputationGraph graph = new ComputationGraph(residualConfiguration(flags.inputs, flags.hidden,
                        flags.layers));
                graph.init();
                net = graph;
                fit = graph::fit;
                state = () -> graph.getUpdater().getStateViewArray();
            } else {
                MultiLayerNetwork network = new MultiLayerNetwork(configuration(flags.inputs, flags.hidden,
                        flags.layers));
                network.init();
                net = network;
                fit = network::fit;
                state = () -> network.getUpdater().getStateViewArray();
            }
            long built = Pointer.physicalBytes();
            int step = 0;
            for (DataSet batch : data(flags)) {
                fit.accept(batch);
                System.out.printf(Locale.ROOT, "step %d loss=%016x (%.9f)%n", step++,
                        Double.doubleToRawLongBits(net.score()), net.score());
            }
            System.out.printf(Locale.ROOT, "whole network parameters %d, model bytes %d (parameters, gradient view,"
                    + " updater state)%n", net.numParams(), (2 * net.numParams() + state.get().length()) * 4);
            report("whole", before, built, Pointer.physicalBytes());
            return 0;
        } catch (Throwable t) {
            for (Throwable c = t; c != null; c = c.getCause()) {
                if (c instanceof OutOfMemoryError && c.getMessage() != null && c.getMessage().contains("max")) {
                    System.out.println("whole network refused by JavaCPP's cap: " + c);
                    System.out.printf(Locale.ROOT, "whole resident bytes before %d at refusal %d cap %d%n", before,
                            Pointer.physicalBytes(), Pointer.maxPhysicalBytes());
                    return CAPPED;
                }
            }
            throw t;
        }
    }

    private static void detail(Flags flags, String who, String phase) {
        if (flags.memoryDetail) {
            System.out.println(ResidentMemory.now().format(who, phase));
        }
    }

    private static void sleep() {
        try {
            Thread.sleep(500);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void report(String who, long before, long built, long trained) {
        long workspaces = 0;
        int count = 0;
        for (MemoryWorkspace w : Nd4j.getWorkspaceManager().getAllWorkspacesForCurrentThread()) {
            workspaces += w.getCurrentSize();
            count++;
        }
        System.out.printf(Locale.ROOT, "%s workspaces %d of %d bytes; resident bytes before %d after build %d after"
                        + " training %d (growth %d) cap maxPhysicalBytes %d maxBytes %d; JavaCPP totalBytes %d%n", who,
                count, workspaces, before, built, trained, trained - before, Pointer.maxPhysicalBytes(),
                Pointer.maxBytes(), Pointer.totalBytes());
    }

    /** CRC-32 of the array's float values as stored (their bits), to compare runs. */
    static long crc32(INDArray values) {
        float[] v = values.dup().data().asFloat();
        ByteBuffer bytes = ByteBuffer.allocate(4 * v.length).order(ByteOrder.LITTLE_ENDIAN);
        for (float x : v) {
            bytes.putInt(Float.floatToRawIntBits(x));
        }
        CRC32 crc = new CRC32();
        crc.update(bytes.array());
        return crc.getValue();
    }
}
