package org.symmem4j.parallel.mpi;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;
import java.util.concurrent.locks.ReentrantLock;
import org.symmem4j.parallel.Invariants;

/**
 * This process's MPI: initialized once ({@link #world()} does it), finalized at JVM exit (Open MPI's
 * {@code mpirun} treats a process that exits without {@code MPI_Finalize} as failed).
 *
 * <p>Before {@code MPI_Init_thread} the process's environment gets {@code OMPI_MCA_opal_signal=""}
 * unless the user set it: Open MPI otherwise installs its own handlers for SIGSEGV, SIGBUS, SIGFPE and
 * SIGILL, and the JVM needs SIGSEGV itself (implicit null checks, safepoints). MPI calls are made with
 * {@code MPI_ERRORS_RETURN} and every return code is checked. The thread level asked for is
 * {@code MPI_THREAD_MULTIPLE}; with less (at least {@code MPI_THREAD_SERIALIZED}), every call holds one
 * process-wide lock.
 */
public final class Mpi {

    private static final int MPI_THREAD_MULTIPLE = 3;
    private static final ReentrantLock SERIAL = new ReentrantLock();
    private static MpiComm world;
    private static boolean serialize;
    private static boolean finalizedByUs;

    private Mpi() {
    }

    /**
     * Whether Open MPI's library can be opened in this process (it may still fail to initialize).
     *
     * @return true when {@code libmpi.so.40} loads and has Open MPI's symbols
     */
    public static boolean isAvailable() {
        return OpenMpi.loadable();
    }

    /**
     * {@code MPI_COMM_WORLD}, initializing MPI on the first call (thread-safe, idempotent).
     *
     * @return every process of the MPI job (one process when not started by {@code mpirun})
     * @throws MpiUnavailableException when Open MPI is not installed or fails to initialize
     */
    public static synchronized MpiComm world() {
        if (world != null) {
            return world;
        }
        OpenMpi mpi = OpenMpi.get();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment flag = arena.allocate(JAVA_INT);
            mpi.check((int) mpi.finalized.invokeExact(flag), "MPI_Finalized");
            if (flag.get(JAVA_INT, 0) != 0) {
                throw new MpiUnavailableException("MPI was finalized in this process already; it cannot be initialized again"
                        + " (fix: create MPI groups and communicators before anything calls MPI_Finalize, once per"
                        + " process)");
            }
            mpi.check((int) mpi.initialized.invokeExact(flag), "MPI_Initialized");
            boolean ours = flag.get(JAVA_INT, 0) == 0;
            if (ours) {
                if (System.getenv("OMPI_MCA_opal_signal") == null) {
                    setenv("OMPI_MCA_opal_signal", ""); // the JVM keeps its own SIGSEGV/SIGBUS/SIGFPE/SIGILL handlers
                }
                MemorySegment provided = arena.allocate(JAVA_INT);
                int rc = (int) mpi.initThread.invokeExact(MemorySegment.NULL, MemorySegment.NULL, MPI_THREAD_MULTIPLE, provided);
                if (rc != OpenMpi.MPI_SUCCESS) {
                    throw new MpiUnavailableException("MPI_Init_thread failed: " + mpi.describe(rc) + " (MPI error " + rc
                            + "; fix: start the processes with mpirun, or check Open MPI's messages above)");
                }
                int level = provided.get(JAVA_INT, 0);
                if (level < OpenMpi.MPI_THREAD_SERIALIZED) {
                    throw new MpiUnavailableException("MPI provides thread level " + level + ", expected at least"
                            + " MPI_THREAD_SERIALIZED (2): calls come from more than one thread, one at a time (fix:"
                            + " use an Open MPI built with thread support, ompi_info | grep -i thread says)");
                }
                serialize = level < MPI_THREAD_MULTIPLE;
                Runtime.getRuntime().addShutdownHook(Thread.ofPlatform().unstarted(Mpi::finalizeAtExit));
            }
            mpi.check((int) mpi.commSetErrhandler.invokeExact(mpi.commWorld, mpi.errorsReturn), "MPI_Comm_set_errhandler");
            world = MpiComm.wrap(mpi.commWorld, false);
            return world;
        } catch (MpiUnavailableException | MpiException e) {
            throw e;
        } catch (Throwable t) {
            throw OpenMpi.unchecked(t);
        }
    }

    /**
     * The MPI library's own version string, e.g. "Open MPI v4.1.4, ...".
     *
     * @return the library version
     * @throws MpiUnavailableException when Open MPI is not installed
     */
    public static String libraryVersion() {
        OpenMpi mpi = OpenMpi.get();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment text = arena.allocate(8192);
            MemorySegment length = arena.allocate(JAVA_INT);
            mpi.check((int) mpi.libraryVersion.invokeExact(text, length), "MPI_Get_library_version");
            return text.getString(0).strip();
        } catch (MpiException e) {
            throw e;
        } catch (Throwable t) {
            throw OpenMpi.unchecked(t);
        }
    }

    /** Runs an MPI call under the process-wide lock when MPI only serializes threads. */
    static <T> T call(CheckedCall<T> call) {
        boolean lock = serialize;
        if (lock) {
            SERIAL.lock();
        }
        try {
            return call.run();
        } catch (MpiException | MpiUnavailableException e) {
            throw e;
        } catch (Throwable t) {
            throw OpenMpi.unchecked(t);
        } finally {
            if (lock) {
                SERIAL.unlock();
            }
        }
    }

    /** An MPI call through a downcall handle ({@code invokeExact} declares Throwable). */
    @FunctionalInterface
    interface CheckedCall<T> {
        T run() throws Throwable;
    }

    private static synchronized void finalizeAtExit() {
        if (finalizedByUs) {
            return;
        }
        finalizedByUs = true;
        OpenMpi mpi = OpenMpi.get();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment flag = arena.allocate(JAVA_INT);
            int rc = (int) mpi.finalized.invokeExact(flag);
            if (rc == OpenMpi.MPI_SUCCESS && flag.get(JAVA_INT, 0) == 0) {
                int ignored = (int) mpi.finalizeMpi.invokeExact();
            }
        } catch (Throwable ignored) {
            // exiting: nothing left to report to
        }
    }

    private static void setenv(String name, String value) throws Throwable {
        Linker linker = Linker.nativeLinker();
        MethodHandle setenv = linker.downcallHandle(linker.defaultLookup().find("setenv").orElseThrow(),
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
        try (Arena arena = Arena.ofConfined()) {
            int rc = (int) setenv.invokeExact(arena.allocateFrom(name), arena.allocateFrom(value), 0);
            if (rc != 0) {
                throw Invariants.violated("setenv(" + name + ") failed before MPI_Init");
            }
        }
    }
}
