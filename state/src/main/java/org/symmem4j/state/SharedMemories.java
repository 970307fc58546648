package org.symmem4j.state;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.List;
import java.util.function.BiConsumer;
import java.util.function.BiFunction;
import java.util.function.Consumer;

import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmetricMemory;
import org.symmem4j.parallel.TransportCapabilities;
import org.symmem4j.parallel.TransportCapabilities.Capability;
import org.symmem4j.parallel.sync.WaitSubject;
import org.symmem4j.parallel.sync.Waiter;

/** What every structure does the same way: refuse what cannot carry it, allocate, and wait for a peer. */
final class SharedMemories {

    private SharedMemories() {
    }

    /**
     * Collective: checks that the group's transport maps every peer's memory into this process as host memory,
     * then allocates {@code bytes} on every rank.
     *
     * @param group     this rank's group
     * @param bytes     bytes per rank
     * @param structure the structure's name, for the refusal
     * @return the memory
     * @throws UnsupportedOperationException where the transport cannot carry the structure, with its reason
     */
    static SymmetricMemory allocate(Group group, long bytes, String structure) {
        return allocate(group, bytes, structure, null);
    }

    /**
     * As {@link #allocate(Group, long, String)}, where the structure has a GPU form of its own: the refusal on GPU
     * memory names it.
     *
     * @param group     this rank's group
     * @param bytes     bytes per rank
     * @param structure the structure's name, for the refusal
     * @param gpuForm   what to create on a GPU group instead, or null when there is none yet
     * @return the memory
     * @throws UnsupportedOperationException where the transport cannot carry the structure, with its reason
     */
    static SymmetricMemory allocate(Group group, long bytes, String structure, String gpuForm) {
        TransportCapabilities caps = group.transport().capabilities(group);
        if (caps.supports(Capability.DEVICE_MEMORY)) {
            throw new UnsupportedOperationException(structure + " on transport=" + caps.transport()
                    + ": its memory is GPU memory, which the host cannot load from or CAS in place" + (gpuForm == null
                    ? ", and the GPU form of " + structure + " is not built yet (host transports only: threads of one"
                    + " JVM, processes of one machine; fix: create it on a host group)"
                    : " (fix: " + gpuForm + ", or create it on a host group)"));
        }
        if (!caps.supports(Capability.PEER_ACCESS)) {
            throw new UnsupportedOperationException(structure + " on transport=" + caps.transport() + " needs every"
                    + " rank's memory mapped in this process (loads, stores and CAS on peers' memory), which this group"
                    + " refuses: " + caps.get(Capability.PEER_ACCESS).reason() + " (fix: create it on a group"
                    + " of one machine,"
                    + " a Group.split by machine)");
        }
        return SymmetricMemory.allocate(group, bytes);
    }

    /**
     * Collective: as {@link #allocate}, but GPU memory is welcome too (the caller moves its bytes with copies and
     * kernels, never host loads), as long as every peer's memory is mapped on this rank (host: in this process;
     * GPU: on this rank's GPU through peer access).
     *
     * @param group     this rank's group
     * @param bytes     bytes per rank
     * @param structure the structure's name, for the refusal
     * @return the memory
     * @throws UnsupportedOperationException where peers' memory is not mapped here, with the reason
     */
    static SymmetricMemory allocateMapped(Group group, long bytes, String structure) {
        TransportCapabilities caps = group.transport().capabilities(group);
        if (!caps.supports(Capability.PEER_ACCESS)) {
            throw new UnsupportedOperationException(structure + " on transport=" + caps.transport() + " needs every"
                    + " rank's memory mapped on this rank (zero-copy views and copies from peers' shards), which this"
                    + " group refuses: " + caps.get(Capability.PEER_ACCESS).reason() + " (fix: create it on a"
                    + " group of one"
                    + " machine, a Group.split by machine)");
        }
        return SymmetricMemory.allocate(group, bytes);
    }

    /**
     * A waiter bounded by the group's timeout, with its idle strategy.
     *
     * @param group the group
     * @return a waiter to reuse
     */
    static Waiter waiter(Group group) {
        return new Waiter(group.options().idleStrategy().get(), group.options().timeout());
    }

    /**
     * A wait for rank {@code peer} (or any rank, -1): fails when the group is aborted or the peer is gone, and
     * at the deadline with {@code what} and {@code fix} in the message.
     *
     * @param group     this rank's group
     * @param peer      the rank waited for, -1 when any
     * @param operation what this rank does, e.g. {@code "ring buffer put"}
     * @param what      what it waits for, e.g. {@code "free bytes=4104 of capacity=65536"}
     * @param fix       what the user can do
     * @return the subject
     */
    static WaitSubject waitFor(Group group, int peer, String operation, java.util.function.Supplier<String> what,
                               String fix) {
        List<Integer> missing = peer >= 0 ? List.of(peer) : others(group);
        return new WaitSubject() {
            @Override
            public void checkProgressPossible(long waitedNanos) {
                if (group.abortState().isRaised()) {
                    throw new PeerTimeoutException(operation + ": rank=" + group.rank() + " stopped waiting for "
                            + who(group, peer) + ": the group was aborted (" + group.abortState().cause() + "; fix: act"
                            + " on that cause on the rank that raised it, then create a new group)",
                            group.rank(), missing, operation, PeerTimeoutException.Reason.PEER_ABORTED,
                            group.options().timeout());
                }
                if (peer >= 0 && !group.isAlive(peer)) {
                    throw new PeerTimeoutException(operation + ": rank=" + group.rank() + " waited for "
                            + group.describe(peer) + ", which has exited, for " + what.get() + " (fix: see that rank's"
                            + " output for why it exited, correct that, then start every rank again)",
                            group.rank(), missing, operation, PeerTimeoutException.Reason.PEER_EXITED,
                            group.options().timeout());
                }
            }

            @Override
            public RuntimeException deadlinePassed(Duration timeout) {
                return new PeerTimeoutException(operation + ": rank=" + group.rank() + " waited timeout=" + timeout
                        + " for " + who(group, peer) + ": " + what.get() + " (fix: " + fix + ")", group.rank(), missing,
                        operation, PeerTimeoutException.Reason.DEADLINE_PASSED, timeout);
            }
        };
    }

    private static String who(Group group, int peer) {
        return peer >= 0 ? group.describe(peer) : "any of ranks " + others(group);
    }

    /** {@return every rank of {@code group} but this one, ascending} */
    static List<Integer> others(Group group) {
        return java.util.stream.IntStream.range(0, group.worldSize()).filter(r -> r != group.rank()).boxed().toList();
    }

    /** Bytes of host zeros {@link #zeroOnDevice} copies at a time. */
    private static final long ZERO_CHUNK = 1L << 20;

    /**
     * Zeroes this rank's part of memory the host cannot write in place (GPU memory), by synchronous copies of host
     * zeros.
     *
     * @param memory the memory, this rank's whole buffer
     */
    static void zeroOnDevice(SymmetricMemory memory) {
        long bytes = memory.byteSize();
        if (bytes == 0) {
            return;
        }
        MemorySegment zeros = java.lang.foreign.Arena.ofAuto().allocate(Math.min(bytes, ZERO_CHUNK));
        for (long at = 0; at < bytes; at += zeros.byteSize()) {
            memory.copyFromHost(zeros.asSlice(0, Math.min(zeros.byteSize(), bytes - at)), at);
        }
    }

    /**
     * Collective: the set-up every structure in GPU memory shares. Allocates {@code bytes} of mapped memory on every
     * rank ({@link #allocateMapped}), takes the kernel-side {@code capability} the structure runs on, zeroes this
     * rank's part ({@link #zeroOnDevice}), lets {@code format} write (and check) what this rank writes before the group
     * meets, meets it at a barrier, and {@code build}s this rank's view. The memory is closed, and the exception
     * rethrown, when any step fails.
     *
     * @param group      this rank's group
     * @param bytes      bytes per rank
     * @param structure  the structure's name, for the refusals
     * @param capability what the structure needs of the memory (a {@link SymmetricMemory#unwrap} type)
     * @param lacks      what the memory lacks without the capability, for the refusal
     * @param fix        what to do instead, for the refusal
     * @param format     this rank's writes into its zeroed part, given the memory and the capability
     * @param build      this rank's view of the structure, from the formatted memory and the capability
     * @param <C>        the capability's type
     * @param <T>        the structure's type
     * @return this rank's view
     * @throws UnsupportedOperationException where peers' memory is not mapped here, or the memory lacks the capability
     */
    static <C, T> T createOnDevice(Group group, long bytes, String structure, Class<C> capability, String lacks,
                                   String fix, BiConsumer<SymmetricMemory, C> format,
                                   BiFunction<SymmetricMemory, C, T> build) {
        SymmetricMemory memory = allocateMapped(group, bytes, structure);
        try {
            C kernels = memory.unwrap(capability).orElseThrow(() ->
                    new UnsupportedOperationException(structure + " on transport="
                            + group.transport().capabilities(group).transport() + ": its symmetric memory has no "
                            + lacks + " (" + capability.getSimpleName() + "; fix: " + fix + ")"));
            zeroOnDevice(memory);
            format.accept(memory, kernels);
            memory.barrier(); // every rank's zeroed part and its format's writes, before any rank's kernel reaches it
            return build.apply(memory, kernels);
        } catch (RuntimeException e) {
            memory.close();
            throw e;
        }
    }

    /**
     * Writes a header at offset 0 of this rank's device memory and checks it there: {@code format}s it in host
     * memory, {@code write}s it, {@code readBack}s the copy and {@code verify}s what came back.
     *
     * @param bytes    the header's bytes
     * @param format   fills the host header
     * @param write    copies the host header to offset 0
     * @param readBack copies offset 0 back into the host segment given
     * @param verify   checks the copy read back; throws when it is not the header
     */
    static void writeHeader(long bytes, Consumer<MemorySegment> format, Consumer<MemorySegment> write,
                            Consumer<MemorySegment> readBack, Consumer<MemorySegment> verify) {
        try (java.lang.foreign.Arena a = java.lang.foreign.Arena.ofConfined()) {
            MemorySegment header = a.allocate(bytes, Long.BYTES);
            format.accept(header);
            write.accept(header);
            MemorySegment back = a.allocate(bytes, Long.BYTES);
            readBack.accept(back);
            verify.accept(back);
        }
    }

    /**
     * Collective, set-up only: every rank's {@code mine} must be equal; else every rank throws the same message.
     *
     * @param group     this rank's group
     * @param structure the structure's name, for the message
     * @param tag       the exchange's tag
     * @param mine      this rank's arguments, as text
     * @param fix       what the user can do
     * @throws IllegalArgumentException on every rank, naming the first rank that differs from rank 0
     */
    static void agree(Group group, String structure, String tag, String mine, String fix) {
        List<byte[]> all = group.allGatherBytes(tag, mine.getBytes(java.nio.charset.StandardCharsets.UTF_8));
        String first = new String(all.getFirst(), java.nio.charset.StandardCharsets.UTF_8);
        for (int r = 0; r < all.size(); r++) {
            String theirs = new String(all.get(r), java.nio.charset.StandardCharsets.UTF_8);
            if (!theirs.equals(first)) {
                throw new IllegalArgumentException(structure + ": rank=" + r + " passed " + theirs + ", expected " + first
                        + " as rank=0 did (fix: " + fix + ")");
            }
        }
    }

    /**
     * Checks a rank argument.
     *
     * @param group the group
     * @param rank  the rank given
     * @param role  what the rank is, for the message
     * @return the rank
     */
    static int checkRank(Group group, int rank, String role) {
        if (rank < 0 || rank >= group.worldSize()) {
            throw new IllegalArgumentException(role + " rank=" + rank + " is not a rank of the group (expected 0.."
                    + (group.worldSize() - 1) + "; fix: pass a rank below the group's worldSize=" + group.worldSize()
                    + ")");
        }
        return rank;
    }
}
