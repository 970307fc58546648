package org.symmem4j.benchmarks;

import org.symmem4j.examples.Cli;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.group.ProcessGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Parameters;

/**
 * Rank 1 of the process benchmarks, started by {@link PeerProcess} with torchrun's variables set:
 *
 * <pre>
 *   BenchPeer allreduce &lt;bytes&gt; &lt;algorithm&gt;   ({@link ProcessAllReduceBenchmark})
 *   BenchPeer handoff &lt;bytes&gt; &lt;waits&gt;         ({@link StageLinkHandoffBenchmark})
 *   BenchPeer ring &lt;capacity&gt; &lt;kind&gt; &lt;files&gt;   ({@link RingBenchmark})
 *   BenchPeer ringfill &lt;capacity&gt; &lt;kind&gt; &lt;files&gt;   ({@link RingFillBenchmark})
 *   BenchPeer map 0 &lt;kind&gt; &lt;file&gt;                ({@link MapBenchmark})
 *   BenchPeer switch &lt;bytes&gt; &lt;versions&gt;:&lt;poll&gt;   ({@link ParameterCacheSwitchBench} --processes)
 * </pre>
 */
public final class BenchPeer {

    static final String ALL_REDUCE = "allreduce";
    static final String HANDOFF = "handoff";
    static final String RING = "ring";
    static final String RING_FILL = "ringfill";
    static final String MAP = "map";
    static final String SWITCH = "switch";

    private BenchPeer() {
    }

    @Command(name = "BenchPeer", mixinStandardHelpOptions = true, versionProvider = Cli.Version.class,
            description = "Rank 1 of the process benchmarks, started by the JMH benchmark itself with torchrun's"
                    + " variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) set; not meant to be run by hand.")
    static final class Flags {
        @Parameters(index = "0", paramLabel = "WORKLOAD", description = "allreduce, handoff, ring, ringfill, map or switch")
        String workload;
        @Parameters(index = "1", paramLabel = "BYTES", description = "message bytes (switch: the entry's bytes)")
        long bytes;
        @Parameters(index = "2", paramLabel = "VARIANT",
                description = "allreduce: the algorithm (ONE_SHOT, TWO_SHOT, RING); handoff: the waits (BACKOFF, SPIN);"
                        + " ring, ringfill: KIND or KIND+AGAINST (paired mode); switch: the versions to wait for and the poll, 410:version")
        String variant;
        @Parameters(index = "3", arity = "0..1", paramLabel = "FILES",
                description = "ring, ringfill: the path prefix of Agrona's ring files (and ringfill's pacing file), or"
                        + " Aeron's directory")
        String files;
    }

    public static void main(String[] args) {
        Flags f = Cli.parse(new Flags(), args, flags -> {
            // name both values before the group forms: a bad one must not leave rank 0 waiting for this rank
            switch (flags.workload) {
                case ALL_REDUCE -> Algorithm.parse(flags.variant);
                case HANDOFF -> StageLinkHandoffBenchmark.Waits.valueOf(flags.variant);
                case RING -> RingPair.lanes(flags.variant);
                case RING_FILL -> RingFillBenchmark.parseVariant(flags.variant);
                case MAP -> SharedMapPair.Kind.valueOf(flags.variant);
                case SWITCH -> ParameterCacheSwitchBench.ReaderArgs.parse(flags.variant);
                default -> throw new IllegalArgumentException("unknown benchmark peer workload=" + flags.workload
                        + " expected=" + ALL_REDUCE + ", " + HANDOFF + ", " + RING + ", " + RING_FILL + ", " + MAP + " or " + SWITCH
                        + " (fix: BenchPeer is started by the benchmarks themselves; pass one of those)");
            }
            return flags;
        });
        switch (f.workload) {
            case ALL_REDUCE -> allReduce(f.bytes, Algorithm.parse(f.variant));
            case MAP -> {
                try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
                    SharedMapPair.serve(SharedMapPair.Kind.valueOf(f.variant), group, new java.io.File(f.files));
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            }
            case RING -> {
                try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
                    RingPair.serve(RingPair.lanes(f.variant), group, (int) f.bytes, java.nio.file.Path.of(f.files));
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            }
            case SWITCH -> {
                try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
                    var reader = ParameterCacheSwitchBench.ReaderArgs.parse(f.variant);
                    ParameterCacheSwitchBench.reader(group, f.bytes, reader.versions(), reader.poll());
                }
            }
            case RING_FILL -> {
                try (ProcessGroup group = ProcessGroup.fromEnvironment()) {
                    RingFillBenchmark.serve(RingFillBenchmark.parseVariant(f.variant), group, (int) f.bytes,
                            java.nio.file.Path.of(f.files));
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            }
            default -> {
                StageLinkHandoffBenchmark.Waits waits = StageLinkHandoffBenchmark.Waits.valueOf(f.variant);
                try (ProcessGroup group = ProcessGroup.fromEnvironment(waits.options())) {
                    StageLinkPingPong.serveEchoes(group, f.bytes);
                }
            }
        }
    }

    private static void allReduce(long bytes, Algorithm algorithm) {
        long count = bytes / 4;
        try (ProcessGroup group = ProcessGroup.fromEnvironment();
             Communicator comm = Communicator.create(group);
             SymmetricMemory mem = SymmetricMemory.allocate(group, bytes);
             SymmetricMemory control = SymmetricMemory.allocate(group, 0)) {
            HostAllReduceBenchmark.fill(mem);
            PeerDriver.serve(new PeerDriver.SignalChannel(control),
                    () -> comm.allReduce(mem, 0, count, DType.FLOAT32, ReduceOp.SUM, algorithm));
        }
    }
}
