package org.symmem4j.serving.weights;

import java.lang.foreign.MemorySegment;

import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.symmem4j.parallel.cuda.WorkerProcesses;
import org.symmem4j.parallel.group.ProcessGroup;

/**
 * One rank of {@link SharedWeightsProcessTest}: rank 0 publishes an MLP's and a CNN's parameters; every other rank
 * opens them, checks its view lies in the owner's mapped memory (no copy), and compares its networks' outputs
 * bitwise with networks that own the same parameters (built from the same seeds).
 */
public final class SharedWeightsProcessWorker {

    private SharedWeightsProcessWorker() {
    }

    public static void main(String[] args) {
        WorkerProcesses.exitWith(() -> {
            ProcessGroup group = ProcessGroup.fromEnvironment();
            try (SharedWeights weights = SharedWeights.create(group, 0, 1 << 20, 8)) {
                MultiLayerNetwork mlp = Nets.owning(Nets.mlp(21));
                MultiLayerNetwork cnn = Nets.owning(Nets.cnn(22));
                if (group.rank() == 0) {
                    weights.publish("mlp", 1, mlp.params());
                    weights.publish("cnn", 1, cnn.params());
                }
                group.allGatherBytes("published", new byte[0]);
                MemorySegment mlpParams = weights.open("mlp", 1);
                MemorySegment cnnParams = weights.open("cnn", 1);
                if (mlpParams == null || cnnParams == null) {
                    throw new AssertionError("rank " + group.rank() + " does not see the owner's weights");
                }
                MultiLayerNetwork a = SharedNetworks.multiLayer(Nets.mlp(0), mlpParams);
                MultiLayerNetwork b = SharedNetworks.multiLayer(Nets.cnn(0), cnnParams);
                if (a.params().data().address() != mlpParams.address()) {
                    throw new AssertionError("the network's parameters are a copy, not the shared memory");
                }
                INDArray x = Nets.features(5, 6, 8);
                INDArray img = Nets.features(6, 6, 1, 8, 8);
                if (!SharedWeightsTest.bitwiseEqual(mlp.output(x), a.output(x))
                        || !SharedWeightsTest.bitwiseEqual(cnn.output(img), b.output(img))) {
                    throw new AssertionError("rank " + group.rank() + ": outputs over the shared weights differ from"
                            + " the owning networks'");
                }
                group.allGatherBytes("checked", new byte[0]);
            }
            return "WEIGHTS OK rank=" + group.rank();
        });
    }
}
