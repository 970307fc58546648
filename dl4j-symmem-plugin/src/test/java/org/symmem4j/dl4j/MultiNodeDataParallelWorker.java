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
 * {@link MultiNodeTransport} (machines pretended with {@code -Dsymmem4j.pretendRanksPerNode}), trains
 * {@link GroupModeTest}'s MLP with the data-parallel wrapper in group mode exactly as
 * {@link GroupModeTest} does with threads (ZeRO sharding when a stage is the third argument), and rank 0 writes
 * the parameters, the updater state and every step's score into the folder given as the first argument.
 */
public final class MultiNodeDataParallelWorker {

    private MultiNodeDataParallelWorker() {
    }

    public static void main(String[] args) throws IOException {
        Path out = Path.of(args[0]);
        int batches = Integer.parseInt(args[1]);
        try (MpiComm world = Mpi.world();
             ProcessGroup group = ProcessGroup.fromEnvironment(GroupOptions.defaults().withTimeout(Duration.ofSeconds(120)),
                     MultiNodeTransport.over(world))) {
            String engine;
            try (Communicator probe = Communicator.create(group)) {
                engine = probe.transportName();
            }
            List<DataSet> data = Nets.batches(7, batches, 8, DataType.FLOAT);
            MultiLayerNetwork model = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
            SymmemParallelWrapper.Builder builder = SymmemParallelWrapper.builder(model).group(group);
            if (args.length > 2) {
                builder.sharding(ZeroStage.valueOf(args[2]));
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
            System.out.println("rank " + group.rank() + " OK: trained on " + engine + ", " + o.scores().size() + " steps,"
                    + " parameters CRC-32 " + Long.toHexString(crc.getValue()));
        }
    }
}
