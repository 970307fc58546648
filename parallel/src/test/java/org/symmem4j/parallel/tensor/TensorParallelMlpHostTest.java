package org.symmem4j.parallel.tensor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.TensorParallelGemm;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * What the GPU tensor-parallel API does where there is no GPU (CI): host communicators have no
 * {@link TensorParallelGemm}, and {@link TensorParallelMlp} refuses bad sizes and host transports with the
 * reason, before allocating anything. The GPU behaviour is {@code CudaTensorParallelTest}'s.
 */
class TensorParallelMlpHostTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(30));

    @Test
    void hostCommunicatorsHaveNoTensorParallelGemms() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (Communicator comm = Communicator.create(group)) {
                assertTrue(comm.unwrap(TensorParallelGemm.class).isEmpty());
            }
            return null;
        });
    }

    @Test
    void theBlockRefusesSizesThatDoNotSplitAndHostTransports() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (Communicator comm = Communicator.create(group)) {
                IllegalArgumentException odd = assertThrows(IllegalArgumentException.class,
                        () -> new TensorParallelMlp(comm, 63, 32, 64, DType.FLOAT32));
                assertTrue(odd.getMessage().contains("tokens=63") && odd.getMessage().contains("tensor-parallel size 2"),
                        odd.getMessage());
                assertThrows(IllegalArgumentException.class, () -> new TensorParallelMlp(comm, 64, 32, 63, DType.FLOAT32));
                assertThrows(IllegalArgumentException.class, () -> new TensorParallelMlp(comm, 64, 0, 64, DType.FLOAT32));
                UnsupportedOperationException host = assertThrows(UnsupportedOperationException.class,
                        () -> new TensorParallelMlp(comm, 64, 32, 64, DType.FLOAT32));
                assertTrue(host.getMessage().contains("runs on GPUs"), host.getMessage());
            }
            return null;
        });
    }

    @Test
    void partialsHoldTheReceivingAndSendingSlots() {
        assertEquals(2L * 4096 * 1792 * 2, TensorParallelGemm.partialsBytes(4096, 1792, DType.BFLOAT16));
        assertEquals(2L * 8 * 3 * 4, TensorParallelGemm.partialsBytes(8, 3, DType.FLOAT32));
    }
}
