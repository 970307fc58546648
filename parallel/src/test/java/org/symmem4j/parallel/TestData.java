package org.symmem4j.parallel;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;
import org.symmem4j.parallel.numeric.BFloat16;

/** Inputs exactly representable in each dtype, written to and read from segments as doubles. */
public final class TestData {

    private TestData() {
    }

    /** count values in [-1, 1), rounded to dtype so the double equals the stored element exactly. */
    public static double[] random(long seed, int count, DType dtype) {
        SplittableRandom rnd = new SplittableRandom(seed);
        double[] v = new double[count];
        for (int i = 0; i < count; i++) {
            v[i] = roundTo(dtype, rnd.nextDouble(-1, 1));
        }
        return v;
    }

    public static double roundTo(DType dtype, double x) {
        return switch (dtype) {
            case FLOAT64 -> x;
            case FLOAT32 -> (float) x;
            case BFLOAT16 -> BFloat16.toFloat(BFloat16.fromFloat((float) x));
        };
    }

    public static void write(MemorySegment seg, long offset, DType dtype, double[] values) {
        for (int i = 0; i < values.length; i++) {
            set(seg, offset, dtype, i, values[i]);
        }
    }

    public static void set(MemorySegment seg, long offset, DType dtype, long i, double value) {
        switch (dtype) {
            case FLOAT64 -> seg.set(ValueLayout.JAVA_DOUBLE_UNALIGNED, offset + i * 8, value);
            case FLOAT32 -> seg.set(ValueLayout.JAVA_FLOAT_UNALIGNED, offset + i * 4, (float) value);
            case BFLOAT16 -> seg.set(ValueLayout.JAVA_SHORT_UNALIGNED, offset + i * 2, BFloat16.fromFloat((float) value));
        }
    }

    public static double get(MemorySegment seg, long offset, DType dtype, long i) {
        return switch (dtype) {
            case FLOAT64 -> seg.get(ValueLayout.JAVA_DOUBLE_UNALIGNED, offset + i * 8);
            case FLOAT32 -> seg.get(ValueLayout.JAVA_FLOAT_UNALIGNED, offset + i * 4);
            case BFLOAT16 -> BFloat16.toFloat(seg.get(ValueLayout.JAVA_SHORT_UNALIGNED, offset + i * 2));
        };
    }

    public static double[] read(MemorySegment seg, long offset, DType dtype, int count) {
        double[] v = new double[count];
        for (int i = 0; i < count; i++) {
            v[i] = get(seg, offset, dtype, i);
        }
        return v;
    }

    /**
     * The result ONE_SHOT and TWO_SHOT must produce bit for bit: peers combined in rank order in the
     * accumulation type (double for FLOAT64, float otherwise), AVG divided at the end, rounded once.
     */
    public static double rankOrderResult(double[][] inputs, int i, DType dtype, ReduceOp op) {
        int n = inputs.length;
        if (dtype == DType.FLOAT64) {
            double acc = inputs[0][i];
            for (int r = 1; r < n; r++) {
                acc = combine(acc, inputs[r][i], op);
            }
            return op == ReduceOp.AVG ? acc / n : acc;
        }
        float acc = (float) inputs[0][i];
        for (int r = 1; r < n; r++) {
            float b = (float) inputs[r][i];
            acc = switch (op) {
                case SUM, AVG -> acc + b;
                case MAX -> Math.max(acc, b);
                case MIN -> Math.min(acc, b);
            };
        }
        if (op == ReduceOp.AVG) {
            acc = acc / n;
        }
        return roundTo(dtype, acc);
    }

    private static double combine(double a, double b, ReduceOp op) {
        return switch (op) {
            case SUM, AVG -> a + b;
            case MAX -> Math.max(a, b);
            case MIN -> Math.min(a, b);
        };
    }

    /** The float64 reference and the error a correct result may show against it. */
    public static double reference(double[][] inputs, int i, ReduceOp op) {
        int n = inputs.length;
        double acc = inputs[0][i];
        for (int r = 1; r < n; r++) {
            acc = combine(acc, inputs[r][i], op);
        }
        return op == ReduceOp.AVG ? acc / n : acc;
    }

    /**
     * Error bound of an N-term sum in the accumulation type (N·u·Σ|x|) plus the final rounding to
     * dtype (u_dtype·|ref|), doubled for margin; scaled by 1/N for AVG. Zero for MAX/MIN (exact).
     */
    public static double tolerance(double[][] inputs, int i, DType dtype, ReduceOp op, double ref) {
        if (op == ReduceOp.MAX || op == ReduceOp.MIN) {
            return 0;
        }
        int n = inputs.length;
        double absSum = 0;
        for (double[] in : inputs) {
            absSum += Math.abs(in[i]);
        }
        double uAcc = dtype == DType.FLOAT64 ? 0x1p-53 : 0x1p-24;
        double uOut = switch (dtype) {
            case FLOAT64 -> 0x1p-53;
            case FLOAT32 -> 0x1p-24;
            case BFLOAT16 -> 0x1p-8;
        };
        double scale = op == ReduceOp.AVG ? 1.0 / n : 1.0;
        return 2 * ((n + 1) * uAcc * absSum * scale + uOut * Math.abs(ref)) + Double.MIN_NORMAL;
    }
}
