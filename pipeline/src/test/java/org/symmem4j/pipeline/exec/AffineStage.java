package org.symmem4j.pipeline.exec;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.locks.LockSupport;

/**
 * A test stage with two parameters: {@code y = a * x + b} element-wise over {@code width} floats. The
 * last stage's loss is {@code 0.5 * sum((y - target)^2)}. Gradients of {@code a} and {@code b} sum
 * over microbatches; {@link #step()} applies plain SGD. {@link #reference} computes the same
 * training sequentially, so a pipeline run can be checked number by number.
 *
 * <p>With {@code forwardNanos}/{@code backwardNanos} > 0 each pass also takes that long (parked,
 * not spinning, so four ranks fit on two cores), for timing tests. Public for it-tests, which runs
 * the executor across processes with it.
 */
public final class AffineStage implements StageCompute {

    static final float LEARNING_RATE = 0.01f;

    final int stage;
    final boolean last;
    final int width;
    public float a;
    public float b;
    double gradA;
    double gradB;
    private final long forwardNanos;
    private final long backwardNanos;
    private final Map<Integer, float[]> inputs = new HashMap<>();
    /** By microbatch: x and the output gradient between a split backward's two halves. */
    private final Map<Integer, float[][]> kept = new HashMap<>();
    private final float[] out;
    private final MemorySegment outSegment;

    public AffineStage(int stage, int stageCount, int width, long forwardNanos, long backwardNanos) {
        this.stage = stage;
        this.last = stage == stageCount - 1;
        this.width = width;
        this.a = initialA(stage);
        this.b = initialB(stage);
        this.forwardNanos = forwardNanos;
        this.backwardNanos = backwardNanos;
        this.out = new float[width];
        this.outSegment = MemorySegment.ofArray(out);
    }

    static float initialA(int stage) {
        return 0.9f + 0.05f * stage;
    }

    static float initialB(int stage) {
        return 0.1f * (stage % 3) - 0.05f;
    }

    static float feature(int step, int microbatch, int i) {
        return (float) Math.sin(step * 7 + microbatch * 31 + i);
    }

    static float target(int step, int microbatch, int i) {
        return (float) Math.cos(step * 5 + microbatch * 17 + i * 3);
    }

    int stepCount;

    @Override
    public MemorySegment forward(int microbatch, MemorySegment input) {
        float[] x = new float[width];
        if (stage == 0) {
            for (int i = 0; i < width; i++) {
                x[i] = feature(stepCount, microbatch, i);
            }
        } else {
            if (input.byteSize() != 4L * width) {
                throw new IllegalStateException("stage " + stage + " input bytes=" + input.byteSize());
            }
            MemorySegment.copy(input, ValueLayout.JAVA_FLOAT, 0, x, 0, width);
        }
        if (inputs.put(microbatch, x) != null) {
            throw new IllegalStateException("stage " + stage + " forward twice for microbatch " + microbatch);
        }
        for (int i = 0; i < width; i++) {
            out[i] = a * x[i] + b;
        }
        spend(forwardNanos);
        return outSegment;
    }

    @Override
    public MemorySegment backward(int microbatch, MemorySegment outputGradient) {
        MemorySegment inputGradient = backwardInput(microbatch, outputGradient);
        backwardWeight(microbatch);
        return inputGradient;
    }

    /** The split backward's first half: the input gradient {@code a * gy}; keeps x and gy for the weight half. */
    @Override
    public MemorySegment backwardInput(int microbatch, MemorySegment outputGradient) {
        float[] x = inputs.remove(microbatch);
        if (x == null) {
            throw new IllegalStateException("stage " + stage + " backward before forward for microbatch " + microbatch);
        }
        float[] gy = new float[width];
        if (last) {
            for (int i = 0; i < width; i++) {
                gy[i] = a * x[i] + b - target(stepCount, microbatch, i);
            }
        } else {
            MemorySegment.copy(outputGradient, ValueLayout.JAVA_FLOAT, 0, gy, 0, width);
        }
        for (int i = 0; i < width; i++) {
            out[i] = a * gy[i];
        }
        kept.put(microbatch, new float[][] {x, gy});
        spend(backwardNanos / 2);
        return outSegment;
    }

    /** The split backward's second half: the gradients of a and b from what {@link #backwardInput} kept. */
    @Override
    public void backwardWeight(int microbatch) {
        float[][] xAndGy = kept.remove(microbatch);
        if (xAndGy == null) {
            throw new IllegalStateException("stage " + stage + " weight gradient before input gradient for microbatch "
                    + microbatch);
        }
        float[] x = xAndGy[0];
        float[] gy = xAndGy[1];
        for (int i = 0; i < width; i++) {
            gradA += (double) gy[i] * x[i];
            gradB += gy[i];
        }
        spend(backwardNanos - backwardNanos / 2);
    }

    @Override
    public void step() {
        if (!inputs.isEmpty() || !kept.isEmpty()) {
            throw new IllegalStateException("stage " + stage + " step with microbatches in flight: " + inputs.keySet()
                    + " awaiting their weight gradient: " + kept.keySet());
        }
        a -= (float) (LEARNING_RATE * gradA);
        b -= (float) (LEARNING_RATE * gradB);
        gradA = 0;
        gradB = 0;
        stepCount++;
    }

    private static void spend(long nanos) {
        long deadline = System.nanoTime() + nanos;
        for (long left = nanos; left > 0; left = deadline - System.nanoTime()) {
            LockSupport.parkNanos(left);
        }
    }

    /**
     * The parameters {a_0, b_0, a_1, b_1, ...} after {@code steps} steps of the same training run on
     * one thread, stage after stage, microbatch by microbatch (the order of the float sums inside a
     * stage is the same as in a pipeline run: microbatches ascending, which every generated schedule
     * keeps per stage).
     */
    public static float[] reference(int stageCount, int microbatches, int width, int steps) {
        AffineStage[] stages = new AffineStage[stageCount];
        for (int s = 0; s < stageCount; s++) {
            stages[s] = new AffineStage(s, stageCount, width, 0, 0);
        }
        for (int step = 0; step < steps; step++) {
            for (int mb = 0; mb < microbatches; mb++) {
                MemorySegment x = MemorySegment.ofArray(new float[0]);
                for (AffineStage stage : stages) {
                    x = copy(stage.forward(mb, x));
                }
                MemorySegment g = MemorySegment.ofArray(new float[0]);
                for (int s = stageCount - 1; s >= 0; s--) {
                    g = copy(stages[s].backward(mb, g));
                }
            }
            for (AffineStage stage : stages) {
                stage.step();
            }
        }
        float[] params = new float[2 * stageCount];
        for (int s = 0; s < stageCount; s++) {
            params[2 * s] = stages[s].a;
            params[2 * s + 1] = stages[s].b;
        }
        return params;
    }

    private static MemorySegment copy(MemorySegment segment) {
        float[] floats = new float[(int) (segment.byteSize() / 4)];
        MemorySegment.copy(segment, ValueLayout.JAVA_FLOAT, 0, floats, 0, floats.length);
        return MemorySegment.ofArray(floats);
    }
}
