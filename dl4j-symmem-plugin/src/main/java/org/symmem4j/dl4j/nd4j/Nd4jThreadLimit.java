package org.symmem4j.dl4j.nd4j;

import org.nd4j.linalg.factory.Nd4j;

/**
 * ND4J's thread settings for the duration of a {@code fit()}, restored afterwards. Every worker
 * runs ND4J ops at once, so each should use its share of the cores. In nd4j-native 1.0.0-M2.1,
 * {@code Environment.setMaxThreads} changes nothing ({@code maxThreads()} reads back the old value:
 * the native setter is empty); the number of threads libnd4j splits an op over is
 * {@code maxMasterThreads} (its {@code parallel_for} asks for that many), which
 * {@code setMaxMasterThreads} does set (up to {@code maxThreads}, which only
 * {@code OMP_NUM_THREADS} at start-up lowers). BLAS (OpenBLAS) has its own setting. All three are
 * process-wide.
 */
public final class Nd4jThreadLimit implements AutoCloseable {

    private final int previousMaster;
    private final int previousBlas;

    private Nd4jThreadLimit(int previousMaster, int previousBlas) {
        this.previousMaster = previousMaster;
        this.previousBlas = previousBlas;
    }

    /**
     * Limits ND4J's op threads and BLAS threads to {@code threads} until {@link #close()}.
     *
     * @param threads ND4J op and BLAS threads, at least 1
     * @return the previous settings, restored by {@link #close()}
     */
    public static Nd4jThreadLimit of(int threads) {
        Nd4jThreadLimit saved = new Nd4jThreadLimit(Nd4j.getEnvironment().maxMasterThreads(),
                Nd4j.factory().blas().getMaxThreads());
        apply(threads, threads);
        return saved;
    }

    /**
     * Sets ND4J's op threads and BLAS threads to {@code threads} for the rest of the process (until set
     * again): for a process, or a trainer, that keeps the setting.
     *
     * @param threads ND4J op and BLAS threads, at least 1
     */
    public static void set(int threads) {
        apply(threads, threads);
    }

    private static void apply(int master, int blas) {
        Nd4j.getEnvironment().setMaxThreads(master); // a no-op in this ND4J, kept for versions where it works
        Nd4j.getEnvironment().setMaxMasterThreads(master);
        Nd4j.factory().blas().setMaxThreads(blas);
    }

    /** The settings as they were before {@link #of}. */
    @Override
    public void close() {
        apply(previousMaster, previousBlas);
    }
}
