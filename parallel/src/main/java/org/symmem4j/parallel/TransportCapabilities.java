package org.symmem4j.parallel;

import java.util.EnumMap;
import java.util.Map;
import java.util.Objects;

/**
 * What a transport can and cannot do for one group, asked before calling: each {@link Capability} is
 * either supported or refused with the reason, word for word the {@link UnsupportedOperationException}
 * the call would throw. The transports throw their refusals from this record ({@link #require},
 * {@link #refusal}), so the table and the behaviour cannot drift apart. As NCCL's transport table,
 * the whole matrix is in {@code docs/transport-capabilities.md}; {@link #table()} prints one column.
 *
 * <pre>{@code
 * TransportCapabilities caps = group.transport().capabilities(group);   // collective, as allocate is
 * SymmetricMemory grads = caps.supports(Capability.REGISTER)
 *         ? SymmetricMemory.register(group, gradients)                    // in place
 *         : SymmetricMemory.allocate(group, gradients.byteSize());        // staged
 * }</pre>
 *
 * Which algorithms a communicator runs is not a transport capability: ask the communicator
 * ({@link Communicator#supports(Algorithm)}).
 *
 * @param transport the transport's {@link Transport#name()}
 * @param entries   every capability's answer, one per {@link Capability}
 */
public record TransportCapabilities(String transport, Map<Capability, Support> entries) {

    /** What a caller may ask of a transport, with the words the table prints. */
    public enum Capability {
        /** {@link SymmetricMemory#allocate}: fresh memory on every rank, every peer's mapped where the transport maps it. */
        ALLOCATE("symmetric memory allocate"),
        /** {@link SymmetricMemory#register}: an existing buffer made visible to the peers, collectives run on it in place. */
        REGISTER("symmetric memory register"),
        /** {@link SymmetricMemory#peer}: every rank's memory reachable from this rank (puts, signals, our kernels). */
        PEER_ACCESS("peer access to every rank's memory"),
        /** {@link Communicator#reduceScatter(SymmetricMemory, long, long, DType, ReduceOp)}: the in-place shard form. */
        IN_PLACE_REDUCE_SCATTER("reduceScatter on SymmetricMemory"),
        /** {@link Communicator#allGather(SymmetricMemory, long, long, DType)}: the in-place shard form. */
        IN_PLACE_ALL_GATHER("allGather on SymmetricMemory"),
        /** {@link Group#split} and {@link DeviceMesh}: the transport serves sub-groups ({@link Transport#forSubGroup}). */
        SUB_GROUPS("sub-groups"),
        /** The memory is GPU memory ({@link Transport#deviceMemory()}): communicators take device buffers. */
        DEVICE_MEMORY("device memory"),
        /** The transport serves ranks that are processes of their own (one JVM per rank), not only threads of one JVM. */
        CROSS_PROCESS("ranks as processes"),
        /**
         * {@link SymmetricMemory#decommit} and {@link SymmetricMemory#residentBytes}: allocated memory is sparse (pages
         * hold memory only once written) and gives pages back on request; what ZeRO stage 3 needs.
         */
        DECOMMIT("decommit pages (sparse memory)");

        private final String label;

        Capability(String label) {
            this.label = label;
        }

        /** {@return the words the table prints, e.g. {@code symmetric memory register}} */
        public String label() {
            return label;
        }
    }

    /**
     * One capability's answer.
     *
     * @param supported whether the transport does it for the group
     * @param reason    for a refusal, the exception's message (what was found and the fix); for a
     *                  supported capability, a short note on how, or empty
     */
    public record Support(boolean supported, String reason) {

        /**
         * Checks the answer.
         *
         * @throws NullPointerException if {@code reason} is null
         */
        public Support {
            Objects.requireNonNull(reason, "reason");
        }

        /**
         * Supported.
         *
         * @param how a short note on how, or empty
         * @return the answer
         */
        public static Support yes(String how) {
            return new Support(true, how);
        }

        /**
         * Refused.
         *
         * @param reason the message of the exception the call throws: what was found, and the fix
         * @return the answer
         */
        public static Support no(String reason) {
            return new Support(false, reason);
        }

        /**
         * The exception a refusal throws: what a refusal site whose answer needs no fact of the group throws.
         *
         * @return the exception, the reason as its message
         * @throws IllegalStateException when this answer is a support, not a refusal
         */
        public UnsupportedOperationException exception() {
            if (supported) {
                throw new IllegalStateException("a supported capability has no refusal to throw (" + reason + "); fix:"
                        + " call exception() only when supported() is false");
            }
            return new UnsupportedOperationException(reason);
        }
    }

    /**
     * Checks that every capability is answered, and keeps an unmodifiable copy in {@link Capability} order.
     *
     * @throws NullPointerException     if an argument is null
     * @throws IllegalArgumentException if a capability has no answer
     */
    public TransportCapabilities {
        Objects.requireNonNull(transport, "transport");
        EnumMap<Capability, Support> copy = new EnumMap<>(Capability.class);
        copy.putAll(Objects.requireNonNull(entries, "entries"));
        for (Capability c : Capability.values()) {
            if (copy.get(c) == null) {
                throw new IllegalArgumentException("transport " + transport + " capabilities: capability=" + c
                        + " has no answer (every capability is supported or refused with a reason; fix: give every"
                        + " Capability an entry, Support.yes(how) or Support.no(reason))");
            }
        }
        entries = java.util.Collections.unmodifiableMap(copy);
    }

    /**
     * The refusal of a transport that does not implement {@link Transport#forSubGroup}, {@code %s} its name: what
     * that method's default throws, and the {@link Capability#SUB_GROUPS} answer of such a transport.
     */
    public static final String SUB_GROUPS_NOT_IMPLEMENTED = "transport %s cannot serve sub-groups (Group.split,"
            + " DeviceMesh) yet: it must implement Transport.forSubGroup to hand the members' per-rank facts on";

    /**
     * A builder of the answers; every capability must be answered before {@link Builder#build()}.
     *
     * @param transport the transport's name
     * @return a builder
     */
    public static Builder of(String transport) {
        return new Builder(transport);
    }

    /**
     * The answer for {@code capability}.
     *
     * @param capability what is asked
     * @return supported, or refused with the reason
     */
    public Support get(Capability capability) {
        return entries.get(Objects.requireNonNull(capability, "capability"));
    }

    /**
     * Whether the transport does {@code capability} for the group.
     *
     * @param capability what is asked
     * @return true when supported
     */
    public boolean supports(Capability capability) {
        return get(capability).supported();
    }

    /**
     * Throws the refusal when {@code capability} is refused, else returns: what a transport calls at a refusal site.
     *
     * @param capability what the caller is about to do
     * @throws UnsupportedOperationException with the reason as its message, when refused
     */
    public void require(Capability capability) {
        if (!supports(capability)) {
            throw refusal(capability);
        }
    }

    /**
     * The exception a refused {@code capability} throws, for a site that must end in a {@code throw}.
     *
     * @param capability a refused capability
     * @return the exception, the reason as its message
     * @throws IllegalStateException when {@code capability} is supported (the caller's facts disagree with this record)
     */
    public UnsupportedOperationException refusal(Capability capability) {
        if (supports(capability)) {
            throw Invariants.violated("transport " + transport + ": capability=" + capability + " is supported,"
                    + " expected refused (the refusal site and the capability record disagree)");
        }
        return get(capability).exception();
    }

    /**
     * The answers as text, one capability a line: {@code label: yes (how)} or {@code label: no: reason}.
     *
     * @return the table, lines ending in {@code \n}
     */
    public String table() {
        StringBuilder out = new StringBuilder("transport ").append(transport).append('\n');
        for (Map.Entry<Capability, Support> e : entries.entrySet()) {
            Support s = e.getValue();
            out.append("  ").append(e.getKey().label()).append(": ").append(s.supported() ? "yes" : "no");
            if (!s.reason().isEmpty()) {
                out.append(s.supported() ? " (" + s.reason() + ")" : ": " + s.reason());
            }
            out.append('\n');
        }
        return out.toString();
    }

    /** Collects the answers of one transport for one group. */
    public static final class Builder {
        private final String transport;
        private final EnumMap<Capability, Support> entries = new EnumMap<>(Capability.class);

        private Builder(String transport) {
            this.transport = Objects.requireNonNull(transport, "transport");
        }

        /**
         * Supports {@code capability}.
         *
         * @param capability what the transport does
         * @param how        a short note on how, or empty
         * @return this builder
         */
        public Builder yes(Capability capability, String how) {
            entries.put(capability, Support.yes(how));
            return this;
        }

        /**
         * Refuses {@code capability}.
         *
         * @param capability what the transport refuses
         * @param reason     the refusal's message: what was found, and the fix
         * @return this builder
         */
        public Builder no(Capability capability, String reason) {
            entries.put(capability, Support.no(reason));
            return this;
        }

        /**
         * Sets {@code capability}'s answer.
         *
         * @param capability what is asked
         * @param support    its answer
         * @return this builder
         */
        public Builder set(Capability capability, Support support) {
            entries.put(capability, Objects.requireNonNull(support, "support"));
            return this;
        }

        /**
         * The record.
         *
         * @return the answers
         * @throws IllegalArgumentException if a capability has no answer
         */
        public TransportCapabilities build() {
            return new TransportCapabilities(transport, entries);
        }
    }
}
