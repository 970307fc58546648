package org.symmem4j.dl4j.nd4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Proxy;
import java.util.List;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataBuffer;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.nd4j.linalg.indexing.NDArrayIndex;
import org.symmem4j.dl4j.Nets;

/**
 * What of the ND4J adapter runs on the CPU backend (the tests' nd4j-native): its refusals — the data type and a view
 * first, then the backend — and its reflective reach into ND4J's buffers. Its GPU path needs DL4J's CUDA backend on an
 * Ampere/Ada GPU, which the project's machines are not.
 */
class Nd4jDeviceGradientsTest {

    @Test
    void theCpuBackendIsRefusedSayingWhatGpuModeNeedsAndWhatToUseOtherwise() {
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> Nd4jDeviceGradients.of(Nd4j.create(DataType.FLOAT, 8)));
        String m = e.getMessage();
        for (String part : List.of("backend=org.nd4j.linalg.cpu.nativecpu.CpuBackend", "host memory", "nd4j-cuda-11.6",
                "sm_80", "Hopper", "host group mode")) {
            assertTrue(m.contains(part), "missing '" + part + "' in: " + m);
        }
    }

    /** DL4J's own flat gradient view passes the array's checks (it is a whole buffer): only the backend is refused. */
    @Test
    void dl4jsFlatGradientViewIsAWholeBufferAndOnlyTheBackendIsRefused() {
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.FLOAT);
        net.initGradientsView(); // as the wrapper's replicas have it (ModelReplica.ensureInitialized)
        INDArray view = net.getGradientsViewArray();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> Nd4jDeviceGradients.of(view));
        assertTrue(e.getMessage().contains("nd4j-native"), e.getMessage());
    }

    @Test
    void dataTypesOurAllReduceDoesNotTakeAreRefusedBeforeTheBackend() {
        for (DataType type : List.of(DataType.HALF, DataType.INT, DataType.LONG)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> Nd4jDeviceGradients.of(Nd4j.create(type, 8)));
            assertTrue(e.getMessage().contains("dataType=" + type) && e.getMessage().contains("FLOAT, DOUBLE or BFLOAT16"),
                    e.getMessage());
        }
    }

    @Test
    void aViewOfPartOfABufferIsRefusedBeforeTheBackend() {
        INDArray middle = Nd4j.create(DataType.FLOAT, 10).get(NDArrayIndex.interval(2, 6));
        INDArray secondRow = Nd4j.create(DataType.FLOAT, 2, 5).getRow(1);
        INDArray firstRow = Nd4j.create(DataType.DOUBLE, 2, 5).getRow(0); // offset 0, but half the buffer
        for (INDArray view : List.of(middle, secondRow, firstRow)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Nd4jDeviceGradients.of(view));
            assertTrue(e.getMessage().contains("whole of its data buffer") && e.getMessage().contains("getGradientsViewArray"),
                    e.getMessage());
        }
    }

    /**
     * The native buffer is reached through {@code getOpaqueDataBuffer()} found on the buffer's class: on the CPU
     * backend's buffer it is found and has no device copy (address 0); a buffer class without it is named.
     */
    @Test
    void theNativeBufferIsFoundOnNd4jsBufferClassAndABufferWithoutOneIsNamed() {
        assertEquals(0, Nd4jDeviceGradients.devicePointer(Nd4j.create(DataType.FLOAT, 4).data()));
        DataBuffer foreign = (DataBuffer) Proxy.newProxyInstance(DataBuffer.class.getClassLoader(),
                new Class<?>[] {DataBuffer.class}, (proxy, method, args) -> {
                    throw new UnsupportedOperationException(method.getName());
                });
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Nd4jDeviceGradients.devicePointer(foreign));
        assertTrue(e.getMessage().contains(foreign.getClass().getName()) && e.getMessage().contains("getOpaqueDataBuffer()"),
                e.getMessage());
    }

    @Test
    void theCpuBackendHasNoExecutionStream() {
        IllegalStateException e = assertThrows(IllegalStateException.class, Nd4jDeviceGradients::executionStream);
        assertTrue(e.getMessage().contains("no CUDA stream") && e.getMessage().contains("nd4j-cuda-11.6"), e.getMessage());
    }
}
