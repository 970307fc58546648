package org.symmem4j.parallel.trace;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static java.lang.foreign.ValueLayout.JAVA_SHORT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import org.symmem4j.parallel.Configuration;
import org.symmem4j.parallel.DType;

/**
 * NVTX ranges, so that an Nsight Systems profile ({@code nsys profile -t cuda,nvtx}) shows symmem4j's GPU
 * collectives, fused GEMMs, tensor-parallel MLP steps and pipeline actions on each rank's thread, above the
 * kernels they enqueue. NVTX is bound through FFM at class initialisation: {@code libnvtx3interop.so.1} (CUDA 13,
 * whose NVTX is otherwise header-only) or {@code libnvToolsExt.so.1} (older CUDA), by soname and then in
 * {@code $CUDA_HOME/lib64}, {@code $CUDA_HOME/lib}, {@code /usr/local/cuda/lib64} and {@code /usr/local/cuda/lib};
 * {@link Configuration#NVTX_LIBRARY -Dsymmem4j.nvtx.library=PATH} names the file, {@code =off} loads none.
 *
 * <p><b>Cost when absent.</b> Without the library every {@link #push}, {@link #pop} and {@link #mark} is one test of
 * a {@code static final} flag, which the JIT folds away: nothing is allocated, nothing is called. {@link #range}
 * encodes nothing then either.
 *
 * <p><b>When present.</b> Ranges belong to the NVTX domain {@value #DOMAIN} ({@code nvtxDomainRangePushEx}), or,
 * with a library that lacks the domain calls, to the default domain ({@code nvtxRangePushEx}, else
 * {@code nvtxRangePushA}). A range's name is encoded as a NUL-terminated C string once, when the {@link Range} is
 * made (callers keep theirs in {@code static final} fields); {@link #push(Range, long)} adds the operation's size
 * in bytes as the range's 64-bit payload (shown in the timeline's tooltip; {@code nsys stats --report nvtx_sum}
 * groups by name), written into a per-thread attribute block, so no call allocates. Without an attached tool
 * (no {@code nsys}) NVTX's own calls return at once.
 *
 * <p>Ranges are per thread and nest: pop on the thread that pushed, in a {@code finally}. NVTX's return values
 * (the nesting depth, negative without a tool) are not errors and are not checked: an annotation never fails a
 * run.
 */
public final class Nvtx {

    /** The NVTX domain of symmem4j's ranges (a row of its own in Nsight Systems' timeline). */
    public static final String DOMAIN = "symmem4j";

    /** {@code nvtxEventAttributes_t} (v2, {@code NVTX_VERSION} 3): offsets of the fields written here; 48 bytes. */
    static final long ATTR_VERSION = 0;
    static final long ATTR_SIZE = 2;
    static final long ATTR_CATEGORY = 4;
    static final long ATTR_COLOR_TYPE = 8;
    static final long ATTR_COLOR = 12;
    static final long ATTR_PAYLOAD_TYPE = 16;
    static final long ATTR_PAYLOAD = 24;
    static final long ATTR_MESSAGE_TYPE = 32;
    static final long ATTR_MESSAGE = 40;
    static final long ATTR_BYTES = 48;
    private static final short NVTX_VERSION = 3;
    private static final int COLOR_ARGB = 1;
    private static final int PAYLOAD_NONE = 0;
    private static final int PAYLOAD_UNSIGNED_INT64 = 1;
    private static final int MESSAGE_ASCII = 1;
    /** Distinct ARGB colours; a range takes one by its name's hash, so a name keeps its colour from run to run. */
    private static final int[] PALETTE = {0xFF76B900, 0xFF1F77B4, 0xFFFF7F0E, 0xFFD62728, 0xFF9467BD, 0xFF8C564B,
        0xFFE377C2, 0xFF17BECF};

    private static final Binding BINDING;
    private static final String STATUS;
    /** Folded by the JIT: with no library every call below is dead code. */
    private static final boolean ON;

    static {
        List<String> why = new ArrayList<>();
        String named = Configuration.NVTX_LIBRARY.get();
        Binding found = null;
        if (named != null && named.equalsIgnoreCase("off")) {
            why.add("-Dsymmem4j.nvtx.library=off");
        } else {
            found = Binding.search(candidates(named, System.getenv("CUDA_HOME")), why);
        }
        BINDING = found;
        ON = found != null;
        STATUS = found != null ? "NVTX ranges on: " + found.describe()
                : "NVTX ranges off (" + String.join("; ", why) + ")"
                        + (named != null && named.equalsIgnoreCase("off") ? "" : ": to see symmem4j's ranges in nsys, put"
                        + " libnvtx3interop.so.1 (CUDA 13) or libnvToolsExt.so.1 on the library path, or pass"
                        + " -Dsymmem4j.nvtx.library=/path/to/it");
    }

    private Nvtx() {
    }

    /**
     * Whether an NVTX library is bound (ranges reach a profiler when one is attached).
     *
     * @return true when ranges are emitted
     */
    public static boolean enabled() {
        return ON;
    }

    /**
     * What was loaded, which calls are used, or why NVTX is off (every place tried).
     *
     * @return one line for logs and {@code symmem4j doctor}
     */
    public static String describe() {
        return STATUS;
    }

    /**
     * A range name, encoded for NVTX once (keep it in a {@code static final} field). With NVTX off nothing is encoded.
     *
     * @param name printable ASCII, 1 to 255 characters, e.g. {@code "symmem4j all_reduce"}
     * @return the range
     * @throws IllegalArgumentException when the name is empty, too long or not printable ASCII
     */
    public static Range range(String name) {
        return new Range(name, ON);
    }

    /**
     * Opens a range on this thread (no-op without NVTX).
     *
     * @param range the range's name
     */
    public static void push(Range range) {
        if (ON) {
            BINDING.push(range, -1);
        }
    }

    /**
     * Opens a range on this thread carrying {@code bytes} as its payload (no-op without NVTX).
     *
     * @param range the range's name
     * @param bytes the operation's size in bytes; negative: no payload
     */
    public static void push(Range range, long bytes) {
        if (ON) {
            BINDING.push(range, bytes);
        }
    }

    /**
     * Opens a range on this thread carrying {@code count} elements of {@code dtype}, in bytes, as its payload (no-op
     * without NVTX, where not even the product is computed). A collective's range carries its call's count argument.
     *
     * @param range the range's name
     * @param count elements; negative: no payload
     * @param dtype their type; null (a call about to fail its checks): no payload
     */
    public static void push(Range range, long count, DType dtype) {
        if (ON) {
            BINDING.push(range, dtype == null || count < 0 ? -1 : count * dtype.byteSize());
        }
    }

    /** Closes this thread's innermost range (no-op without NVTX). */
    public static void pop() {
        if (ON) {
            BINDING.pop();
        }
    }

    /**
     * An instant event on this thread (no-op without NVTX).
     *
     * @param range the event's name
     */
    public static void mark(Range range) {
        if (ON) {
            BINDING.mark(range);
        }
    }

    /** The libraries to try, in order: the named one alone, else the sonames and then the CUDA directories. */
    static List<String> candidates(String named, String cudaHome) {
        if (named != null && !named.isBlank()) {
            return List.of(named.strip());
        }
        List<String> names = List.of("libnvtx3interop.so.1", "libnvToolsExt.so.1");
        Set<String> out = new LinkedHashSet<>(names);
        List<String> homes = cudaHome == null || cudaHome.isBlank() ? List.of("/usr/local/cuda")
                : List.of(cudaHome.strip(), "/usr/local/cuda");
        for (String home : homes) {
            for (String dir : List.of(home + "/lib64", home + "/lib")) {
                for (String name : names) {
                    out.add(dir + "/" + name);
                }
            }
        }
        return List.copyOf(out);
    }

    /**
     * A range or mark name: the Java string and, when encoded, its NUL-terminated C string and a read-only attribute
     * block without payload (shared by every thread).
     */
    public static final class Range {
        private final String name;
        final int color;
        final MemorySegment message;
        final MemorySegment attributes;

        Range(String name, boolean encode) {
            if (name == null || name.isEmpty() || name.length() > 255) {
                throw new IllegalArgumentException("NVTX range name=" + (name == null ? "null" : "\"" + name + "\"")
                        + ": expected 1 to 255 characters (fix: a short name such as \"symmem4j all_reduce\")");
            }
            for (int i = 0; i < name.length(); i++) {
                char c = name.charAt(i);
                if (c < 0x20 || c > 0x7e) {
                    throw new IllegalArgumentException("NVTX range name=\"" + name + "\" has character " + (int) c
                            + " at " + i + ": expected printable ASCII (fix: rename the range)");
                }
            }
            this.name = name;
            this.color = color(name);
            if (encode) {
                message = Arena.global().allocateFrom(name, StandardCharsets.US_ASCII);
                attributes = Arena.global().allocate(ATTR_BYTES, 8);
                writeHeader(attributes, color);
                writeMessage(attributes, message, -1);
            } else {
                message = null;
                attributes = null;
            }
        }

        /** {@return the name} */
        public String name() {
            return name;
        }

        @Override
        public String toString() {
            return name;
        }
    }

    static int color(String name) {
        return PALETTE[Math.floorMod(name.hashCode(), PALETTE.length)];
    }

    /** The fields of an attribute block that do not change from call to call. */
    static void writeHeader(MemorySegment a, int color) {
        a.fill((byte) 0);
        a.set(JAVA_SHORT, ATTR_VERSION, NVTX_VERSION);
        a.set(JAVA_SHORT, ATTR_SIZE, (short) ATTR_BYTES);
        a.set(JAVA_INT, ATTR_CATEGORY, 0);
        a.set(JAVA_INT, ATTR_COLOR_TYPE, COLOR_ARGB);
        a.set(JAVA_INT, ATTR_COLOR, color);
        a.set(JAVA_INT, ATTR_MESSAGE_TYPE, MESSAGE_ASCII);
    }

    /** The message, colour and payload of one call ({@code payload < 0}: none). */
    static void writeMessage(MemorySegment a, MemorySegment message, long payload) {
        a.set(JAVA_INT, ATTR_PAYLOAD_TYPE, payload < 0 ? PAYLOAD_NONE : PAYLOAD_UNSIGNED_INT64);
        a.set(JAVA_LONG, ATTR_PAYLOAD, payload < 0 ? 0 : payload);
        a.set(ADDRESS, ATTR_MESSAGE, message);
    }

    /**
     * One loaded NVTX library and the calls it offers, best first: the {@value #DOMAIN} domain's
     * {@code nvtxDomainRangePushEx}/{@code nvtxDomainRangePop}/{@code nvtxDomainMarkEx}; else the default domain's
     * {@code nvtxRangePushEx}/{@code nvtxRangePop}/{@code nvtxMarkEx}; else {@code nvtxRangePushA}/{@code nvtxMarkA}
     * (names only, no payload).
     */
    static final class Binding {

        enum Mode { DOMAIN, EX, ASCII }

        private final String library;
        private final Mode mode;
        private final MemorySegment domain;
        private final MethodHandle pushHandle;
        private final MethodHandle popHandle;
        private final MethodHandle markHandle;
        /** Per thread: an attribute block for pushes with a payload (the shared ones are read-only). */
        private final ThreadLocal<MemorySegment> scratch = ThreadLocal.withInitial(() -> {
            MemorySegment a = Arena.ofAuto().allocate(ATTR_BYTES, 8);
            writeHeader(a, 0);
            return a;
        });

        private Binding(String library, Mode mode, MemorySegment domain, MethodHandle push, MethodHandle pop,
                        MethodHandle mark) {
            this.library = library;
            this.mode = mode;
            this.domain = domain;
            this.pushHandle = push;
            this.popHandle = pop;
            this.markHandle = mark;
        }

        /** The first of {@code candidates} that loads and offers a set of calls; {@code why} collects the failures. */
        static Binding search(List<String> candidates, List<String> why) {
            for (String name : candidates) {
                Optional<Binding> b = load(name, why);
                if (b.isPresent()) {
                    return b.get();
                }
            }
            return null;
        }

        /** {@code library} bound, or empty with the reason added to {@code why}. */
        static Optional<Binding> load(String library, List<String> why) {
            SymbolLookup lookup;
            try {
                lookup = SymbolLookup.libraryLookup(library, Arena.global());
            } catch (IllegalArgumentException | IllegalCallerException | UnsatisfiedLinkError e) {
                why.add(library + " could not be loaded (" + e.getMessage() + ")");
                return Optional.empty();
            }
            Linker linker = Linker.nativeLinker();
            FunctionDescriptor intOfAddress = FunctionDescriptor.of(JAVA_INT, ADDRESS);
            FunctionDescriptor voidOfAddress = FunctionDescriptor.ofVoid(ADDRESS);
            Optional<MemorySegment> create = lookup.find("nvtxDomainCreateA");
            Optional<MemorySegment> domainPush = lookup.find("nvtxDomainRangePushEx");
            Optional<MemorySegment> domainPop = lookup.find("nvtxDomainRangePop");
            Optional<MemorySegment> domainMark = lookup.find("nvtxDomainMarkEx");
            if (create.isPresent() && domainPush.isPresent() && domainPop.isPresent() && domainMark.isPresent()) {
                MemorySegment domain;
                try {
                    MethodHandle createHandle = linker.downcallHandle(create.get(), FunctionDescriptor.of(ADDRESS, ADDRESS));
                    domain = (MemorySegment) createHandle.invokeExact(
                            Arena.global().allocateFrom(DOMAIN, StandardCharsets.US_ASCII));
                } catch (Throwable t) {
                    why.add(library + ": nvtxDomainCreateA failed (" + t + ")");
                    return Optional.empty();
                }
                return Optional.of(new Binding(library, Mode.DOMAIN, domain,
                        linker.downcallHandle(domainPush.get(), FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS)),
                        linker.downcallHandle(domainPop.get(), intOfAddress),
                        linker.downcallHandle(domainMark.get(), FunctionDescriptor.ofVoid(ADDRESS, ADDRESS))));
            }
            Optional<MemorySegment> pop = lookup.find("nvtxRangePop");
            if (pop.isEmpty()) {
                why.add(library + " has no nvtxRangePop (not an NVTX library?)");
                return Optional.empty();
            }
            MethodHandle popHandle = linker.downcallHandle(pop.get(), FunctionDescriptor.of(JAVA_INT));
            Optional<MemorySegment> pushEx = lookup.find("nvtxRangePushEx");
            Optional<MemorySegment> markEx = lookup.find("nvtxMarkEx");
            if (pushEx.isPresent() && markEx.isPresent()) {
                return Optional.of(new Binding(library, Mode.EX, MemorySegment.NULL,
                        linker.downcallHandle(pushEx.get(), intOfAddress), popHandle,
                        linker.downcallHandle(markEx.get(), voidOfAddress)));
            }
            Optional<MemorySegment> pushA = lookup.find("nvtxRangePushA");
            Optional<MemorySegment> markA = lookup.find("nvtxMarkA");
            if (pushA.isPresent() && markA.isPresent()) {
                return Optional.of(new Binding(library, Mode.ASCII, MemorySegment.NULL,
                        linker.downcallHandle(pushA.get(), intOfAddress), popHandle,
                        linker.downcallHandle(markA.get(), voidOfAddress)));
            }
            why.add(library + " has neither nvtxRangePushEx/nvtxMarkEx nor nvtxRangePushA/nvtxMarkA");
            return Optional.empty();
        }

        Mode mode() {
            return mode;
        }

        String describe() {
            return library + switch (mode) {
                case DOMAIN -> " (domain \"" + DOMAIN + "\", nvtxDomainRangePushEx with byte payloads)";
                case EX -> " (default domain, nvtxRangePushEx with byte payloads)";
                case ASCII -> " (default domain, nvtxRangePushA: names only)";
            };
        }

        /** Pushes {@code range} ({@code payload < 0}: none); returns NVTX's nesting depth. */
        int push(Range range, long payload) {
            try {
                if (mode == Mode.ASCII) {
                    return (int) pushHandle.invokeExact(range.message);
                }
                MemorySegment a = range.attributes;
                if (payload >= 0) {
                    a = scratch.get();
                    a.set(JAVA_INT, ATTR_COLOR, range.color);
                    writeMessage(a, range.message, payload);
                }
                return mode == Mode.DOMAIN ? (int) pushHandle.invokeExact(domain, a) : (int) pushHandle.invokeExact(a);
            } catch (Throwable t) {
                throw unchecked(t);
            }
        }

        int pop() {
            try {
                return mode == Mode.DOMAIN ? (int) popHandle.invokeExact(domain) : (int) popHandle.invokeExact();
            } catch (Throwable t) {
                throw unchecked(t);
            }
        }

        void mark(Range range) {
            try {
                switch (mode) {
                    case DOMAIN -> markHandle.invokeExact(domain, range.attributes);
                    case EX -> markHandle.invokeExact(range.attributes);
                    case ASCII -> markHandle.invokeExact(range.message);
                }
            } catch (Throwable t) {
                throw unchecked(t);
            }
        }

        private static RuntimeException unchecked(Throwable t) {
            if (t instanceof RuntimeException r) {
                return r;
            }
            if (t instanceof Error e) {
                throw e;
            }
            return new IllegalStateException(t);
        }
    }
}
