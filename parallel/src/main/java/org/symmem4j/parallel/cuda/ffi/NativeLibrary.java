package org.symmem4j.parallel.cuda.ffi;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.util.Optional;

/**
 * A shared library bound by soname at run time through FFM: no native artifacts of our own, any
 * CPU architecture. {@link #tryLoad} never throws: a machine without the library gets an absent
 * optional and a reason, so GPU paths can say why they are off.
 */
final class NativeLibrary {

    private final String soname;
    private final SymbolLookup lookup;
    private final Linker linker = Linker.nativeLinker();

    private NativeLibrary(String soname, SymbolLookup lookup) {
        this.soname = soname;
        this.lookup = lookup;
    }

    /** The library, or empty with {@code reason[0]} set to why not. */
    static Optional<NativeLibrary> tryLoad(String soname, String[] reason) {
        try {
            return Optional.of(new NativeLibrary(soname, SymbolLookup.libraryLookup(soname, Arena.global())));
        } catch (IllegalArgumentException | IllegalCallerException | UnsatisfiedLinkError e) {
            reason[0] = soname + " could not be loaded (" + e.getMessage() + ")";
            return Optional.empty();
        }
    }

    /** A downcall handle for {@code name}; throws naming the symbol if the library lacks it. */
    MethodHandle function(String name, FunctionDescriptor descriptor) {
        return linker.downcallHandle(lookup.find(name).orElseThrow(() -> new UnsatisfiedLinkError(
                soname + " has no symbol " + name + " (the installed version is too old?; fix: install a newer "
                        + soname + " (docs/getting-started.md names the versions symmem4j needs))")), descriptor);
    }

    /** As {@link #function} but empty when the symbol is missing (optional features such as NCCL windows). */
    Optional<MethodHandle> optionalFunction(String name, FunctionDescriptor descriptor) {
        return lookup.find(name).map(s -> linker.downcallHandle(s, descriptor));
    }

    /**
     * The text a library's status-to-string function ({@code cublasGetStatusString}, {@code ncclGetErrorString}: a status
     * in, a NUL-terminated static string out) gives for {@code status}, read up to {@code maxBytes}; a note instead when
     * that call itself fails, so an error report never loses the status it reports.
     */
    static String statusText(MethodHandle toString, int status, long maxBytes) {
        try {
            MemorySegment s = (MemorySegment) toString.invokeExact(status);
            return s.reinterpret(maxBytes).getString(0);
        } catch (Throwable t) {
            return "(no text: " + t + ")";
        }
    }

    /**
     * What a downcall's {@code invokeExact} threw, as an unchecked exception to throw: the
     * signature says {@code Throwable}, but native calls only raise runtime exceptions and errors
     * (which are rethrown as they are); anything else is wrapped rather than lost.
     */
    static RuntimeException unchecked(Throwable t) {
        if (t instanceof RuntimeException r) {
            return r;
        }
        if (t instanceof Error e) {
            throw e;
        }
        return new IllegalStateException(t);
    }
}
