package org.symmem4j.gradsync;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.MemorySegment;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;

/** What of device gradient averaging runs without a GPU: its refusals (the GPU path is {@link DeviceGradientAveragingGpuTest}). */
class DeviceGradientAveragingTest {

    @Test
    void aCommunicatorWithoutAGpuSideIsRefusedSayingWhatToUse() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new DeviceGradientAveraging(
                AcrossMachinesPolicyTest.runs(2, Set.of(Algorithm.ONE_SHOT)), AlgorithmPolicy.calibrated()));
        assertTrue(e.getMessage().contains("no DeviceCommunicator") && e.getMessage().contains("GradientSynchronizer"),
                e.getMessage());
    }

    @Test
    void aGradientMustBeWholeElements() {
        MemorySegment odd = MemorySegment.ofAddress(0x1000).reinterpret(10);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> DeviceGradients.of(odd, DType.FLOAT32, MemorySegment.NULL));
        assertTrue(e.getMessage().contains("10 bytes") && e.getMessage().contains("FLOAT32"), e.getMessage());
        assertTrue(DeviceGradients.of(odd.reinterpret(12), DType.FLOAT32, MemorySegment.NULL).elements() == 3);
    }
}
