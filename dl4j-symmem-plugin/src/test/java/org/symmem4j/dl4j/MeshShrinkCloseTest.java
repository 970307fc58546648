package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import org.deeplearning4j.nn.conf.MultiLayerConfiguration;
import org.deeplearning4j.nn.conf.NeuralNetConfiguration;
import org.deeplearning4j.nn.conf.layers.DenseLayer;
import org.deeplearning4j.nn.conf.layers.OutputLayer;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.activations.Activation;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.lossfunctions.LossFunctions;
import org.symmem4j.dl4j.tensor.TensorParallel;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceMesh;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * What {@link MeshShrink} owns across two successive shrinks and at the wrapper's close, on threads (a real shrink needs
 * one process per rank: {@code TensorParallelShrinkAfterKillTest}; the mesh's own two shrinks are
 * {@code DeviceMeshShrinkTwiceTest}'s): each shrink's survivors' world, mesh and tp communicator are stood in for by a
 * world split off the test's, a mesh on it and a communicator over its tp group, handed over as a shrink hands them
 * ({@link MeshShrink#adopt}). The second shrink closes the first's (the network now on the second's communicator); the
 * close detaches the network from the communicator it closes (before the fix the network kept the closed one), and
 * leaves alone a network the caller attached elsewhere since.
 */
class MeshShrinkCloseTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(60));

    /** A small network whose first layer is column-parallel and second row-parallel: 6 -> 8 -> 6 -> 3. */
    private static MultiLayerNetwork unsharded() {
        MultiLayerConfiguration conf = new NeuralNetConfiguration.Builder().seed(5).dataType(DataType.DOUBLE).list()
                .layer(new DenseLayer.Builder().nIn(6).nOut(8).activation(Activation.TANH).build())
                .layer(new DenseLayer.Builder().nIn(8).nOut(6).activation(Activation.TANH).build())
                .layer(new OutputLayer.Builder(LossFunctions.LossFunction.MCXENT).nIn(6).nOut(3)
                        .activation(Activation.SOFTMAX).build())
                .build();
        MultiLayerNetwork net = new MultiLayerNetwork(conf);
        net.init();
        return net;
    }

    /** What one shrink forms on a rank: a world of its own (split off), its dp x tp mesh and a tp communicator. */
    private record Formed(Group world, DeviceMesh mesh, Communicator communicator) {

        static Formed of(Group base, String label) {
            Group world = base.split(0, base.rank(), label);
            DeviceMesh mesh = DeviceMesh.of(world, "dp", 1, "tp", 2);
            return new Formed(world, mesh, Communicator.create(mesh.group("tp")));
        }
    }

    @Test
    void aSecondShrinkClosesTheFirstsAndTheCloseDetachesTheNetworkFromWhatItCloses() {
        MultiLayerNetwork initial = unsharded();
        INDArray x = Nd4j.rand(DataType.DOUBLE, 4, 6);
        List<String> checked = InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (DeviceMesh callers = DeviceMesh.of(group, "dp", 1, "tp", 2);
                 Communicator callersComm = Communicator.create(callers.group("tp"))) {
                MultiLayerNetwork net = TensorParallel.shard(initial, callers.coordinate("tp"), 2, 0);
                TensorParallel.attach(net, callersComm);
                MeshShrink shrinks = new MeshShrink(callers, "dp", "tp");

                Formed first = Formed.of(group, "first-shrink");
                TensorParallel.attach(net, first.communicator());
                shrinks.adopt(net, first.communicator(), first.mesh());
                assertSame(first.mesh(), shrinks.mesh());
                INDArray before = net.output(x);

                Formed second = Formed.of(group, "second-shrink");
                TensorParallel.attach(net, second.communicator());
                shrinks.adopt(net, second.communicator(), second.mesh());
                assertSame(second.mesh(), shrinks.mesh());
                assertThrows(IllegalStateException.class, () -> first.mesh().group("tp"), "the first shrink's mesh is"
                        + " closed by the second");
                assertSame(second.mesh().group("tp"), TensorParallel.groupOrNull(net));
                assertTrue(before.equalsWithEps(net.output(x), 1e-12), "the network goes on over the second's"
                        + " communicator");
                callers.group("tp"); // the caller's mesh stays open: the caller's

                shrinks.close();
                assertNull(TensorParallel.groupOrNull(net), "closed with the wrapper: the network holds no closed"
                        + " communicator");
                IllegalStateException unattached = assertThrows(IllegalStateException.class, () -> net.output(x));
                assertTrue(unattached.getMessage().contains("has no group")
                        && unattached.getMessage().contains("TensorParallel.attach"), unattached.getMessage());
                assertThrows(IllegalStateException.class, () -> second.mesh().group("tp"));
                shrinks.close(); // idempotent

                // attached elsewhere by the caller after the last shrink: the close leaves it so
                Formed third = Formed.of(group, "third-shrink");
                MeshShrink again = new MeshShrink(callers, "dp", "tp");
                TensorParallel.attach(net, third.communicator());
                again.adopt(net, third.communicator(), third.mesh());
                TensorParallel.attach(net, callersComm);
                again.close();
                assertSame(callers.group("tp"), TensorParallel.groupOrNull(net));
                assertTrue(before.equalsWithEps(net.output(x), 1e-12));
                return "rank " + group.rank();
            }
        });
        assertTrue(checked.size() == 2, checked.toString());
    }
}
