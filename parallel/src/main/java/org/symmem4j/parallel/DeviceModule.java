package org.symmem4j.parallel;

/**
 * A user's module loaded by {@link DeviceKernels#load} into this rank's GPU context.
 */
public interface DeviceModule extends AutoCloseable {

    /**
     * Collective: finds a kernel and loads it completely now (so that no later launch loads it while
     * peers' kernels run in a shared context). Every rank asks for the same symbols in the same order.
     *
     * @param symbol the kernel's name as the image exports it: declare it {@code extern "C"} so that
     *               its name is not mangled
     * @return the kernel, valid until this module is closed
     * @throws SymmemException on every rank when any rank's module has no such kernel
     */
    DeviceFunction function(String symbol);

    /**
     * Collective: waits for this rank's stream and for the other ranks, then unloads the module; its
     * functions refuse launches after it. Graphs that captured its kernels must be closed first.
     * Idempotent.
     */
    @Override
    void close();
}
