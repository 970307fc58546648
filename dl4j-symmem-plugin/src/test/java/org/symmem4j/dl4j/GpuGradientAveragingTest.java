package org.symmem4j.dl4j;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.foreign.MemorySegment;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.nd4j.linalg.api.buffer.DataType;
import org.nd4j.linalg.api.ndarray.INDArray;
import org.nd4j.linalg.factory.Nd4j;
import org.symmem4j.gradsync.AlgorithmPolicy;
import org.symmem4j.gradsync.DeviceGradients;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The GPU mode's step sync without a GPU: 2 ranks (threads) whose "device" gradients are the host memory of their
 * ND4J gradient views, summed by a real host communicator that stands in for the GPU one (its device side only records
 * the stream orderings), divided and checked by ND4J's CPU backend. What it pins is the GPU mode's arithmetic and
 * verdicts, the same as the host path's: the sum over the ranks divided by the step's examples (float32, bit for bit),
 * the undivided sum for the listeners, idle ranks contributing zeros, and the first non-finite element of each rank's
 * own contribution and of the mean. That ND4J's CUDA backend and our device collectives do this on a GPU needs an
 * Ampere/Ada GPU: not tested here.
 */
class GpuGradientAveragingTest {

    static final int N = 40;

    static float value(int rank, int i) {
        return (float) Math.sin(1.7 * i + rank) * (rank + 2) / 3f;
    }

    /** What one rank saw: its result, its undivided sum, its verdicts and the calls its device side got. */
    record RankOutcome(float[] mean, float[] undivided, long localBad, long reducedBad, List<String> deviceCalls) {
    }

    /** Rank r's view holds value(r, i), with {@code poison[r]} (index → value) written over it; rank {@code idle} is idle. */
    static List<RankOutcome> step(int idleRank, long stepExamples, float[][] poison) {
        return InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(), group -> {
            int me = group.rank();
            List<String> calls = new ArrayList<>();
            try (Communicator host = Communicator.create(group)) {
                INDArray view = Nd4j.create(DataType.FLOAT, new long[] {1, N}, 'f'); // DL4J's flat gradient view's shape
                for (int i = 0; i < N; i++) {
                    view.putScalar(i, value(me, i));
                }
                for (int k = 0; k + 1 < poison[me].length; k += 2) {
                    view.putScalar((int) poison[me][k], poison[me][k + 1]);
                }
                MemorySegment memory = ModelReplica.segmentOf(view);
                DeviceGradients gradients = new DeviceGradients() {
                    @Override
                    public MemorySegment buffer() {
                        return memory;
                    }

                    @Override
                    public DType dtype() {
                        return DType.FLOAT32;
                    }

                    @Override
                    public MemorySegment stream() {
                        return MemorySegment.NULL;
                    }

                    @Override
                    public void beforeSync() {
                        calls.add("beforeSync");
                    }

                    @Override
                    public void afterSync() {
                        calls.add("afterSync");
                    }
                };
                INDArray undivided = Nd4j.create(DataType.FLOAT, N);
                GpuGradientAveraging averaging = new GpuGradientAveraging(withRecordingDeviceSide(host, calls),
                        AlgorithmPolicy.forced(Algorithm.ONE_SHOT), view, gradients);
                GradientAveraging.Outcome outcome = averaging.average(me == idleRank, stepExamples, undivided);
                return new RankOutcome(view.toFloatVector(), undivided.toFloatVector(), outcome.localBad(),
                        outcome.reducedBad(), calls);
            }
        });
    }

    /** {@code comm} as a GPU communicator: its collectives run as they are, its device side records the orderings. */
    static Communicator withRecordingDeviceSide(Communicator comm, List<String> calls) {
        DeviceCommunicator device = (DeviceCommunicator) Proxy.newProxyInstance(DeviceCommunicator.class.getClassLoader(),
                new Class<?>[] {DeviceCommunicator.class}, (proxy, method, args) -> switch (method.getName()) {
                    case "orderAfter", "orderBefore" -> {
                        calls.add(method.getName());
                        yield null;
                    }
                    default -> throw new UnsupportedOperationException(method.getName());
                });
        return (Communicator) Proxy.newProxyInstance(Communicator.class.getClassLoader(), new Class<?>[] {Communicator.class},
                (proxy, method, args) -> {
                    if (method.getName().equals("unwrap") && args[0] == DeviceCommunicator.class) {
                        return Optional.of(device);
                    }
                    if (method.getName().equals("allReduce")) {
                        calls.add("allReduce " + args[3]);
                    }
                    try {
                        return method.invoke(comm, args);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
    }

    @Test
    void theSumOverTheRanksIsDividedByTheStepsExamplesAsOnTheHost() {
        long examples = 7;
        List<RankOutcome> out = step(-1, examples, new float[][] {{}, {}});
        for (int r = 0; r < 2; r++) {
            RankOutcome o = out.get(r);
            for (int i = 0; i < N; i++) {
                float sum = value(0, i) + value(1, i); // ONE_SHOT adds the ranks in rank order
                assertEquals(Float.floatToRawIntBits(sum), Float.floatToRawIntBits(o.undivided()[i]), "undivided " + i);
                assertEquals(Float.floatToRawIntBits(sum / examples), Float.floatToRawIntBits(o.mean()[i]), "mean " + i);
            }
            assertEquals(-1, o.localBad());
            assertEquals(-1, o.reducedBad());
            assertEquals(List.of("beforeSync", "orderAfter", "allReduce SUM", "orderBefore", "afterSync"), o.deviceCalls());
        }
    }

    @Test
    void anIdleRankContributesZerosWhateverItsViewHeld() {
        List<RankOutcome> out = step(1, 5, new float[][] {{}, {3, Float.NaN, 9, Float.POSITIVE_INFINITY}});
        for (RankOutcome o : out) {
            for (int i = 0; i < N; i++) {
                assertEquals(Float.floatToRawIntBits((value(0, i) + 0f) / 5), Float.floatToRawIntBits(o.mean()[i]), "mean " + i);
            }
            assertEquals(-1, o.localBad(), "an idle rank's leftovers are not its contribution");
            assertEquals(-1, o.reducedBad());
        }
    }

    @Test
    void aNonFiniteContributionIsFoundOnItsRankAndInTheMeanOnEveryRank() {
        List<RankOutcome> out = step(-1, 4, new float[][] {{11, Float.NaN, 30, Float.NEGATIVE_INFINITY}, {}});
        assertEquals(11, out.get(0).localBad());
        assertEquals(-1, out.get(1).localBad());
        assertEquals(11, out.get(0).reducedBad());
        assertEquals(11, out.get(1).reducedBad());
    }

    @Test
    void aSumThatOverflowsIsFoundInTheMeanThoughNoRanksOwnValueWasNonFinite() {
        List<RankOutcome> out = step(-1, 2, new float[][] {{6, 3e38f}, {6, 3e38f}});
        for (RankOutcome o : out) {
            assertEquals(-1, o.localBad());
            assertEquals(6, o.reducedBad());
        }
    }
}
