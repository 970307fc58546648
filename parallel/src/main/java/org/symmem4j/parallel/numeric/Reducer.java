package org.symmem4j.parallel.numeric;

import java.lang.foreign.MemorySegment;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/**
 * The element loop of every host collective: {@code dst[i] = src[0][i] ⊕ src[1][i] ⊕ … ⊕ src[n-1][i]},
 * combining sources left to right in the order given (callers pass peers in rank order), then
 * dividing by {@code divisor} when it is positive (the AVG finish).
 *
 * <p>Operands carry their own storage type, so one call can read BFLOAT16 buffers and FLOAT32 partial
 * sums (the ring's) and write either. Arithmetic is in FLOAT64 when the operands are FLOAT64 and in
 * FLOAT32 otherwise; BFLOAT16 is widened exactly and rounded once, to nearest even, when stored.
 * {@code dst} may be one of the sources at the same offset (in place): each element is read from every
 * source before it is written.
 *
 * <p>Two implementations give bitwise-identical results: {@link VectorReducer} (the JDK's Vector API,
 * used when the {@code jdk.incubator.vector} module is present) and {@link ScalarReducer}.
 */
public interface Reducer {

    /**
     * Reduces {@code count} elements of the sources into {@code dst} (see the interface comment).
     *
     * @param srcs        source segments, combined in this order
     * @param srcOffsets  byte offset of element 0 in each source
     * @param srcTypes    storage type of each source
     * @param nsrc        how many of the arrays' entries are used
     * @param divisor     divide the result by this when positive (AVG); 0 for none
     * @param canonicalNaN write every NaN result as the canonical quiet NaN. Needed where each rank
     *                    computes the same elements itself (ONE_SHOT): hardware takes a NaN's sign
     *                    and payload from an operand that depends on the compiled code, which may
     *                    differ between ranks. Not needed where one rank computes an element and the
     *                    others copy it (TWO_SHOT, RING), and it costs: the blend halves the speed of
     *                    a cache-resident float sum.
     * @param dst         destination segment; may be a source at the same offset
     * @param dstOffset   byte offset of element 0 in {@code dst}
     * @param dstType     storage type of {@code dst}
     * @param count       elements to reduce
     * @param op          the reduction
     */
    void reduce(MemorySegment[] srcs, long[] srcOffsets, DType[] srcTypes, int nsrc,
                MemorySegment dst, long dstOffset, DType dstType, long count, ReduceOp op, int divisor,
                boolean canonicalNaN);

    /**
     * Index of the first NaN or infinite element among {@code count} elements of {@code type} at
     * {@code offset}, or -1 when all are finite. Used to catch diverging gradients before (and
     * after) they are averaged.
     *
     * @param segment the elements
     * @param offset byte offset of element 0
     * @param type storage type
     * @param count elements to check
     * @return the index of the first non-finite element, or -1
     */
    long firstNonFinite(MemorySegment segment, long offset, DType type, long count);

    /**
     * Divides {@code count} elements of {@code type} at {@code offset} by {@code divisor}, in place,
     * and returns the index of the first element that is NaN or infinite afterwards, or -1: the
     * finish of a gradient average (sum, then divide by the examples) and its check in one pass
     * instead of two. Each element is {@code x / divisor} in the element type's arithmetic (FLOAT64
     * for FLOAT64, FLOAT32 otherwise, BFLOAT16 rounded once to nearest even): IEEE division, the same
     * bits as any other correctly rounded division of the same operands.
     *
     * @param segment the elements, overwritten
     * @param offset byte offset of element 0
     * @param type storage type
     * @param count elements to divide
     * @param divisor the divisor
     * @return the index of the first non-finite element after division, or -1
     */
    long divideAndFindNonFinite(MemorySegment segment, long offset, DType type, long count, long divisor);

    /** {@return a short name for logs and benchmarks} */
    String name();

    /**
     * The reducer for this JVM: vectorized when {@code jdk.incubator.vector} is enabled (add
     * {@code --add-modules=jdk.incubator.vector}), unless {@code -Dsymmem4j.reducer=scalar}.
     *
     * @return the reducer, chosen once per JVM
     */
    static Reducer forThisJvm() {
        return Holder.INSTANCE;
    }

    /** Lazy holder: decides once per JVM and logs the choice. */
    final class Holder {
        static final Reducer INSTANCE = choose();

        private Holder() {
        }

        private static Reducer choose() {
            Logger log = LoggerFactory.getLogger(Reducer.class);
            if ("scalar".equals(Configuration.REDUCER.get())) {
                log.info("host reductions: scalar (forced by -Dsymmem4j.reducer=scalar)");
                return new ScalarReducer();
            }
            // VectorReducer is touched only when the module is there: loading it without the module
            // fails with NoClassDefFoundError (jdk/incubator/vector/...), which must not reach users.
            Reducer vector = null;
            if (ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent()) {
                try {
                    vector = VectorReducer.createIfAvailable();
                } catch (LinkageError e) {
                    log.warn("host reductions: the Vector API failed to load (" + e
                            + "); using the scalar loops");
                }
            }
            if (vector == null) {
                log.info("host reductions: scalar, because module jdk.incubator.vector is not"
                        + " enabled; add --add-modules=jdk.incubator.vector to the JVM flags for vectorized loops"
                        + " (about 2x faster on cache-resident data)");
                return new ScalarReducer();
            }
            return vector;
        }
    }
}
