package org.symmem4j.dl4j;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.ProcessGroup;
import org.symmem4j.parallel.mpi.Mpi;
import org.symmem4j.parallel.mpi.MpiComm;
import org.symmem4j.parallel.multinode.MultiNodeTransport;

/**
 * One process of {@link MultiNodeDataParallelTest}, started by {@code mpirun}: joins the job's group on
 * {@link MultiNodeTransport} (machines pretended with {@code -Dsymmem4j.pretend.ranks.per.node}), trains
 * {@link GroupModeTest}'s MLP with the data-parallel wrapper in group mode exactly as
 * {@link GroupModeTest} does with threads, and rank 0 writes the parameters, the updater state and every step's
 * score into the folder given as the first argument. The arguments after the number of batches are modes, run one
 * after another in the same processes and group (one {@code mpirun} for several of the test's cases: each launch
 * costs every process a JVM and ND4J to start): {@link #PLAIN}, a ZeRO stage's name, {@link #HSDP} or
 * {@link #DP_TP}. Each mode writes into its own sub-folder, named as the mode, and prefixes its lines with
 * {@code [mode] }.
 */
public final class MultiNodeDataParallelWorker {

    /** The mode of plain data parallelism (no sharding). */
    static final String PLAIN = "PLAIN";
    /** The mode of a dp x tp mesh: data parallelism across the machines, tensor parallelism inside each. */
    static final String DP_TP = "DP_TP";
    /** The mode of stage 3 with hybrid sharding: a shard group per machine of 2 ranks, replicas across them. */
    static final String HSDP = "HSDP";

    private MultiNodeDataParallelWorker() {
    }

    /**
     * A {@code dp x tp = 2 x 2} mesh on 2 machines of 2 ranks: the tensor-parallel pairs inside a machine, the
     * data-parallel pairs across them (a sub-group spanning machines: its own MPI communicator). The MLP's first two
     * layers are a tensor-parallel block; the wrapper in group mode trains over the {@code dp} sub-group; rank 0 writes
     * the gathered network's parameters.
     */
    private static void dataParallelAcrossMachinesTensorParallelInside(ProcessGroup group, List<DataSet> data, Path out,
            String prefix) throws IOException {
        try (org.symmem4j.parallel.DeviceMesh mesh = org.symmem4j.parallel.DeviceMesh.of(group, "dp", 2, "tp", 2)) {
            org.symmem4j.parallel.Group tp = mesh.group("tp");
            org.symmem4j.parallel.Group dp = mesh.group("dp");
            String dpEngine;
            String tpEngine;
            try (Communicator probe = Communicator.create(dp)) {
                dpEngine = probe.transportName();
            }
            MultiLayerNetwork unsharded = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
            MultiLayerNetwork mine = org.symmem4j.dl4j.tensor.TensorParallel.shard(unsharded, tp.rank(), tp.worldSize(), 0);
            MultiLayerNetwork gathered = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
            try (Communicator c = Communicator.create(tp)) {
                tpEngine = c.transportName();
                org.symmem4j.dl4j.tensor.TensorParallel.attach(mine, c);
                GroupModeTest.train(mine, SymmemParallelWrapper.builder(mine).group(dp), data, 2);
                org.symmem4j.dl4j.tensor.TensorParallel.gather(mine, c, gathered);
            }
            if (group.rank() == 0) {
                Nd4j.saveBinary(gathered.params(), out.resolve("params.bin").toFile());
            }
            java.util.zip.CRC32 crc = new java.util.zip.CRC32();
            crc.update(ModelReplica.segmentOf(gathered.params()).asByteBuffer());
            System.out.println(prefix + "rank " + group.rank() + " OK: dp over " + dpEngine + ", tp over " + tpEngine
                    + ", gathered parameters CRC-32 " + Long.toHexString(crc.getValue()));
        }
    }

    public static void main(String[] args) throws IOException {
        Path out = Path.of(args[0]);
        int batches = Integer.parseInt(args[1]);
        List<String> modes = args.length > 2 ? List.of(args).subList(2, args.length) : List.of(PLAIN);
        try (MpiComm world = Mpi.world();
             ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)),
                     MultiNodeTransport.over(world))) {
            String engine;
            try (Communicator probe = Communicator.create(group)) {
                engine = probe.transportName();
            }
            for (String mode : modes) {
                Path dir = out.resolve(mode);
                if (group.rank() == 0) {
                    Files.createDirectories(dir);
                }
                train(group, engine, mode, Nets.batches(7, batches, 8, DataType.FLOAT), dir);
            }
        }
    }

    /** Trains in one mode; rank 0 writes into {@code out}. */
    private static void train(ProcessGroup group, String engine, String mode, List<DataSet> data, Path out)
            throws IOException {
        String prefix = "[" + mode + "] ";
        if (mode.equals(DP_TP)) {
            dataParallelAcrossMachinesTensorParallelInside(group, data, out, prefix);
            return;
        }
        MultiLayerNetwork model = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(model).group(group);
        if (mode.equals(HSDP)) {
            builder.sharding(ZeroStage.PARAMETERS).shardGroupSize(2);
        } else if (!mode.equals(PLAIN)) {
            builder.sharding(ZeroStage.valueOf(mode));
        }
        GroupModeTest.Outcome o = GroupModeTest.train(model, builder, data, 2);
        if (group.rank() == 0) {
            Nd4j.saveBinary(o.params(), out.resolve("params.bin").toFile());
            Nd4j.saveBinary(o.updaterState(), out.resolve("updater.bin").toFile());
            StringBuilder scores = new StringBuilder();
            for (double s : o.scores()) {
                scores.append(Double.doubleToLongBits(s)).append('\n');
            }
            Files.writeString(out.resolve("scores.txt"), scores);
        }
        java.util.zip.CRC32 crc = new java.util.zip.CRC32();
        crc.update(ModelReplica.segmentOf(o.params()).asByteBuffer());
        System.out.println(prefix + "rank " + group.rank() + " OK: trained on " + engine + ", " + o.scores().size()
                + " steps, parameters CRC-32 " + Long.toHexString(crc.getValue()));
    }
}
