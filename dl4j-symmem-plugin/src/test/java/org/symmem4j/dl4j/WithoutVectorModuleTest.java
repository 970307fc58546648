package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.TimeUnit;
import org.deeplearning4j.nn.multilayer.MultiLayerNetwork;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.dataset.DataSet;

/**
 * The wrapper in a JVM started without {@code --add-modules=jdk.incubator.vector}: it trains on the
 * scalar reduction loops, to the same parameters as one model on the merged batches, instead of
 * failing with NoClassDefFoundError. Runs the training in a child JVM started without the flag.
 */
class WithoutVectorModuleTest {

    /** The child: trains 2 workers for a few steps and prints the largest difference from one model. */
    public static void main(String[] args) {
        int workers = 2;
        List<DataSet> data = Nets.batches(3, 8, 8, DataType.DOUBLE);
        MultiLayerNetwork net = Nets.mlp(Nets.updater("adam"), DataType.DOUBLE);
        MultiLayerNetwork reference = net.clone();
        try (SymmemParallelWrapper wrapper = SymmemParallelWrapper.builder(net).workers(workers).build()) {
            wrapper.fit(new BatchListIterator(data));
        }
        for (int s = 0; s < data.size() / workers; s++) {
            reference.fit(Nets.merged(data.subList(s * workers, (s + 1) * workers)));
        }
        System.out.println("VECTOR_MODULE " + ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent());
        System.out.println("MAX_RELATIVE_DIFFERENCE " + Nets.maxRelativeDifference(net.params(), reference.params()));
    }

    @Test
    void theWrapperTrainsWithoutTheVectorModule() throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process p = new ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED", "--sun-misc-unsafe-memory-access=allow",
                "-cp", System.getProperty("java.class.path"), WithoutVectorModuleTest.class.getName())
                .redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertTrue(p.waitFor(300, TimeUnit.SECONDS), out);
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("VECTOR_MODULE false"), out);
        String line = out.lines().filter(l -> l.startsWith("MAX_RELATIVE_DIFFERENCE ")).findFirst().orElseThrow(
                () -> new AssertionError(out));
        double diff = Double.parseDouble(line.substring("MAX_RELATIVE_DIFFERENCE ".length()));
        assertTrue(diff <= 1e-10, "fp64 wrapper vs one model: " + diff);
    }
}
