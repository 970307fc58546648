package org.symmem4j.parallel.control;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;

/**
 * The entry barrier's verdict on every rank's op descriptor: whether all ranks called the same
 * collective with the same arguments and usable buffers, else the one error message every rank throws
 * (see {@link ControlPlane}). Kept apart so the message formats live in one place.
 */
final class DescriptorCheck {

    private DescriptorCheck() {
    }

    /** Null when all descriptors agree and every buffer is large enough; else the error message. */
    static String check(List<Descriptor> all) {
        Descriptor first = all.getFirst();
        String what = label(first.kind()) + "#" + first.seq();
        boolean sameCall = all.stream().allMatch(d -> d.seq() == first.seq() && d.kind() == first.kind());
        if (!sameCall) {
            return "ranks called different collectives: " + list(all, d -> label(d.kind()) + "#" + d.seq())
                    + " (every rank must call the same collectives in the same order)";
        }
        List<String> problems = new ArrayList<>();
        for (int r = 0; r < all.size(); r++) {
            if (all.get(r).problem() != Problem.NONE) {
                problems.add("rank=" + r + " " + describe(all.get(r)));
            }
        }
        if (!problems.isEmpty()) {
            return what + " rejected: " + String.join("; ", problems);
        }
        boolean agree = all.stream().allMatch(d -> d.dtype() == first.dtype() && d.op() == first.op()
                && d.algorithm() == first.algorithm() && d.root() == first.root() && d.count() == first.count()
                && d.memoryId() == first.memoryId() && d.memoryOffset() == first.memoryOffset());
        if (!agree) {
            return what + " arguments differ across ranks: " + list(all, DescriptorCheck::arguments)
                    + " (all ranks must pass the same count, dtype, op, algorithm, root and symmetric region)";
        }
        if (first.kind() == Kind.BARRIER) {
            return null;
        }
        DType dtype = DType.values()[first.dtype()];
        int n = all.size();
        List<String> short_ = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            Descriptor d = all.get(r);
            long[] need = neededBytes(d, dtype, n);
            if (need == null) {
                short_.add("rank=" + r + " count=" + d.count() + " overflows a 64-bit byte size");
                continue;
            }
            if (d.bufferBytes() < need[0]) {
                short_.add("rank=" + r + " " + (need.length > 1 ? "sendBytes=" : "bufferBytes=") + d.bufferBytes()
                        + " needed=" + need[0]);
            }
            if (need.length > 1 && d.recvBytes() < need[1]) {
                short_.add("rank=" + r + " recvBytes=" + d.recvBytes() + " needed=" + need[1]);
            }
        }
        if (!short_.isEmpty()) {
            return what + " buffer too short for count=" + first.count() + " x " + dtype + " (" + dtype.byteSize()
                    + " bytes): " + String.join("; ", short_) + " (every rank's buffers must hold the count)";
        }
        return null;
    }

    /**
     * A rank's problem in words; a read-only destination is named as the caller passed it
     * ({@code buffer}, {@code recv}, or the symmetric {@code memory} of an in-place call).
     */
    static String describe(Descriptor d) {
        if (d.problem() != Problem.READ_ONLY_DESTINATION || d.kind() == null) {
            return d.problem().text();
        }
        if (d.memoryId() >= 0) {
            return "memory is read-only: isReadOnly=true expected=false (this rank registered the symmetric memory"
                    + " from a read-only segment; register a writable one)";
        }
        return d.problem().text(d.kind() == Kind.REDUCE_SCATTER || d.kind() == Kind.ALL_GATHER ? "recv" : "buffer");
    }

    /** Bytes needed: {buffer} or {send, recv}; null on overflow. */
    static long[] neededBytes(Descriptor d, DType dtype, int n) {
        try {
            long one = dtype.bytes(d.count());
            return switch (d.kind()) {
                case ALL_REDUCE, BROADCAST -> new long[] {one};
                case REDUCE_SCATTER -> d.memoryId() >= 0 ? new long[] {one} : new long[] {Math.multiplyExact(one, (long) n), one};
                case ALL_GATHER -> d.memoryId() >= 0 ? new long[] {one} : new long[] {one, Math.multiplyExact(one, (long) n)};
                case BARRIER -> new long[] {0};
            };
        } catch (ArithmeticException e) {
            return null;
        }
    }

    private static String arguments(Descriptor d) {
        StringBuilder b = new StringBuilder("count=").append(d.count());
        b.append(" dtype=").append(name(DType.values(), d.dtype()));
        if (d.kind() == Kind.ALL_REDUCE || d.kind() == Kind.REDUCE_SCATTER) {
            b.append(" op=").append(name(ReduceOp.values(), d.op()));
        }
        if (d.kind() == Kind.ALL_REDUCE) {
            b.append(" algorithm=").append(name(Algorithm.values(), d.algorithm()));
        }
        if (d.kind() == Kind.BROADCAST) {
            b.append(" root=").append(d.root());
        }
        if (d.memoryId() >= 0) {
            b.append(" memory=").append(d.memoryId()).append(" offsetBytes=").append(d.memoryOffset());
        }
        return b.toString();
    }

    private static String name(Enum<?>[] values, int ordinal) {
        return ordinal >= 0 && ordinal < values.length ? values[ordinal].name() : "null";
    }

    static String label(Kind kind) {
        return kind == null ? "unknown" : kind.name().toLowerCase(java.util.Locale.ROOT).replace('_', '-');
    }

    private static String list(List<Descriptor> all, Function<Descriptor, String> f) {
        List<String> parts = new ArrayList<>();
        for (int r = 0; r < all.size(); r++) {
            parts.add("rank=" + r + " " + f.apply(all.get(r)));
        }
        return String.join("; ", parts);
    }
}
