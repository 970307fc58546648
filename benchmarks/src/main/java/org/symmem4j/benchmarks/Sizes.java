package org.symmem4j.benchmarks;

/** Message sizes of the host benchmarks: powers of 4 from 1 KiB to 256 MiB. */
public final class Sizes {

    /**
     * The sizes, for reports. JMH {@code @Param} needs literal arrays, so each benchmark spells the
     * same list out; bench/mpi/run.sh uses it too.
     */
    public static final long[] ALL = {1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864, 268435456};

    /** Operations per JMH invocation: amortizes the peer hand-off; large enough for 1 KiB, small enough for 256 MiB. */
    public static final int OPS_PER_INVOCATION = 16;

    private Sizes() {
    }
}
