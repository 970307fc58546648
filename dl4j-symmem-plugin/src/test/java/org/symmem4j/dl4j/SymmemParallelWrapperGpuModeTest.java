package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Proxy;
import java.util.List;
import java.util.function.UnaryOperator;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.Transport;

/**
 * GPU mode's refusals at {@code build()}, on the CPU backend the tests run: a group whose transport says its memory
 * is a GPU's puts the wrapper in GPU mode, which refuses each setting it does not implement, naming it and the fix,
 * and then ND4J's CPU backend. The group is a stand-in that only answers what {@code build()} asks (its size and its
 * transport): {@code build()} starts nothing. Each setting's test fails if its check is dropped, as the build then
 * ends at the backend's refusal instead. GPU mode's training needs an Ampere/Ada GPU with DL4J's CUDA backend.
 */
class SymmemParallelWrapperGpuModeTest {

    /**
     * Rank 0 of 2 on a transport named {@code fake-gpu} whose memory is a GPU's; its one exchange, build()'s agreement on
     * what each rank refused, answers as if rank 1 had refused alike; anything else it is asked throws.
     */
    static Group gpuGroup() {
        Transport transport = (Transport) Proxy.newProxyInstance(Transport.class.getClassLoader(),
                new Class<?>[] {Transport.class}, (proxy, method, args) -> switch (method.getName()) {
                    case "name" -> "fake-gpu";
                    case "deviceMemory" -> true;
                    default -> throw new UnsupportedOperationException("build() must not " + method.getName());
                });
        return (Group) Proxy.newProxyInstance(Group.class.getClassLoader(), new Class<?>[] {Group.class},
                (proxy, method, args) -> switch (method.getName()) {
                    case "worldSize" -> 2;
                    case "rank" -> 0;
                    case "transport" -> transport;
                    case "allGatherBytes" -> java.util.List.of((byte[]) args[1], (byte[]) args[1]);
                    default -> throw new UnsupportedOperationException("build() must not " + method.getName());
                });
    }

    static MultiLayerNetwork mlp() {
        return Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
    }

    static String refusal(MultiLayerNetwork net, UnaryOperator<SymmemParallelWrapper.Builder> settings) {
        SymmemParallelWrapper.Builder b = settings.apply(SymmemParallelWrapper.builder(net).group(gpuGroup()));
        return assertThrows(IllegalArgumentException.class, b::build).getMessage();
    }

    static void assertMentions(String message, String... parts) {
        for (String part : parts) {
            assertTrue(message.contains(part), "missing '" + part + "' in: " + message);
        }
    }

    @Test
    void theCpuBackendIsRefusedSayingWhatGpuModeNeedsAndWhatToUseOtherwise() {
        assertMentions(refusal(mlp(), b -> b), "GPU mode (group(...) on transport=fake-gpu)",
                "backend=org.nd4j.linalg.cpu.nativecpu.CpuBackend", "nd4j-cuda-11.6", "sm_80", "Hopper", "host group mode");
    }

    /** NCCL, refused on host memory, is one of GPU mode's algorithms: the build goes on to the backend's refusal. */
    @Test
    void ncclIsNotRefusedInGpuMode() {
        for (Algorithm a : List.of(Algorithm.NCCL, Algorithm.NCCL_SYMMETRIC)) {
            assertMentions(refusal(mlp(), b -> b.algorithm(a)), "nd4j-cuda-11.6");
        }
    }

    @Test
    void shardingIsRefused() {
        for (ZeroStage stage : ZeroStage.values()) {
            assertMentions(refusal(mlp(), b -> b.sharding(stage)), "sharding=" + stage, "GPU mode", "fix: drop sharding");
        }
    }

    @Test
    void overlapIsRefused() {
        assertMentions(refusal(mlp(), b -> b.overlapSyncWithBackprop(true)), "overlapSyncWithBackprop=true", "GPU mode",
                "fix: overlapSyncWithBackprop(false)");
    }

    @Test
    void bf16TransferIsRefused() {
        assertMentions(refusal(mlp(), b -> b.gradientTransfer(GradientTransfer.BFLOAT16)), "gradientTransfer=BFLOAT16",
                "GPU mode", "fix: gradientTransfer(GradientTransfer.NETWORK_DTYPE)");
    }

    @Test
    void gradientAccumulationIsRefused() {
        assertMentions(refusal(mlp(), b -> b.gradientAccumulation(4)), "gradientAccumulation=4", "GPU mode",
                "fix: gradientAccumulation(1)");
    }

    @Test
    void layersWithStateUpdatesInTheGradientViewAreRefused() {
        assertMentions(refusal(StateNets.batchNormMlp(DataType.FLOAT, false), b -> b), "keep state updates",
                "BatchNormalization", "GPU mode", "StateUpdateReduction", "fix: a model without such layers");
        String centerLoss = refusal(StateNets.centerLossMlp(DataType.FLOAT, false), b -> b);
        assertMentions(centerLoss, "keep state updates", "GPU mode");
        assertTrue(centerLoss.contains(".cL]") || centerLoss.contains(".cL,"), "the center-loss layer's centers (cL): "
                + centerLoss);
    }

    @Test
    void bucketBytesIsRefused() {
        assertMentions(refusal(mlp(), b -> b.bucketBytes(1 << 20)), "bucketBytes=1048576", "GPU mode",
                "fix: leave bucketBytes unset");
    }
}
