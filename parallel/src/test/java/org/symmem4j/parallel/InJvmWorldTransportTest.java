package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.group.InJvmWorld;
import org.symmem4j.parallel.host.InJvmTransport;

/** A world created on a transport: its groups report it, and the generic entry points go through it. */
class InJvmWorldTransportTest {

    /** Delegates to host-in-jvm and counts the calls that reach it. */
    static final class CountingTransport implements Transport {
        final Transport inner = new InJvmTransport();
        final AtomicInteger allocations = new AtomicInteger();
        final AtomicInteger communicators = new AtomicInteger();

        @Override
        public String name() {
            return "counting";
        }

        @Override
        public SymmetricMemory allocate(Group group, long bytes) {
            allocations.incrementAndGet();
            return inner.allocate(group, bytes);
        }

        @Override
        public SymmetricMemory register(Group group, MemorySegment buffer) {
            return inner.register(group, buffer);
        }

        @Override
        public Communicator communicator(Group group, CommunicatorOptions options) {
            communicators.incrementAndGet();
            return inner.communicator(group, options);
        }

        @Override
        public TransportCapabilities capabilities(Group group) {
            return inner.capabilities(group);
        }

        @Override
        public Transport forSubGroup(int[] parentRanks) {
            return this; // keeps nothing per rank
        }
    }

    @Test
    void groupsOfAWorldCreatedOnATransportUseIt() {
        CountingTransport transport = new CountingTransport();
        List<Float> sums = InJvmWorld.runOnEveryRank(3, GroupOptions.defaults(), transport, group -> {
            assertSame(transport, group.transport());
            try (SymmetricMemory mem = SymmetricMemory.allocate(group, 64);
                 Communicator comm = Communicator.create(group)) {
                mem.local().set(ValueLayout.JAVA_FLOAT, 0, group.rank() + 1f);
                comm.allReduce(mem, 0, 1, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT);
                return mem.local().get(ValueLayout.JAVA_FLOAT, 0);
            }
        });
        assertEquals(List.of(6f, 6f, 6f), sums);
        // 3 ranks: one user allocation each, plus the communicator's scratch allocation each
        assertEquals(3, transport.communicators.get());
        assertEquals(6, transport.allocations.get());
    }

    /**
     * A world on another transport keeps host memory of its own for control planes
     * ({@link Group#hostTransport()}); on host-in-jvm the two are one; sub-groups follow their parent.
     */
    @Test
    void groupsKnowTheirHostTransport() {
        CountingTransport transport = new CountingTransport();
        List<String> seen = InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(), transport, group -> {
            try (Group half = group.split(0, group.rank())) {
                assertSame(transport, half.transport());
                return group.hostTransport().name() + " " + (group.hostTransport() != group.transport()) + " "
                        + half.hostTransport().name();
            }
        });
        assertEquals(List.of("host-in-jvm true host-in-jvm", "host-in-jvm true host-in-jvm"), seen);
        InJvmWorld.runOnEveryRank(2, GroupOptions.defaults(), group -> {
            assertSame(group.transport(), group.hostTransport(), "on host memory the host transport is the transport");
            assertFalse(group.transport().deviceMemory(), "host-in-jvm memory is host memory");
            try (Group half = group.split(0, group.rank())) {
                assertSame(half.transport(), half.hostTransport());
            }
            return null;
        });
    }

    /**
     * A group on a transport whose memory is a GPU's (here one whose memory Java may not touch: it refuses to allocate)
     * gets host memory and host collectives among its ranks from its host transport, for host values beside device work.
     */
    @Test
    void aGroupOnAGpuTransportHasHostMemoryAndCollectivesThroughItsHostTransport() {
        Transport gpu = new Transport() {
            @Override
            public String name() {
                return "gpu-like";
            }

            @Override
            public boolean deviceMemory() {
                return true;
            }

            @Override
            public SymmetricMemory allocate(Group group, long bytes) {
                throw new UnsupportedOperationException("device memory: the host transport must not ask for it");
            }

            @Override
            public SymmetricMemory register(Group group, MemorySegment buffer) {
                throw new UnsupportedOperationException("device memory: the host transport must not ask for it");
            }

            @Override
            public Communicator communicator(Group group, CommunicatorOptions options) {
                throw new UnsupportedOperationException("the GPU communicator: not part of this test");
            }

            @Override
            public TransportCapabilities capabilities(Group group) {
                throw new UnsupportedOperationException("the GPU capabilities: not part of this test");
            }
        };
        List<Double> sums = InJvmWorld.runOnEveryRank(3, GroupOptions.defaults(), gpu, group -> {
            try (SymmetricMemory mem = group.hostTransport().allocate(group, 64);
                 Communicator comm = group.hostTransport().communicator(group, CommunicatorOptions.defaults())) {
                mem.local().set(ValueLayout.JAVA_DOUBLE, 0, group.rank() + 0.5);
                comm.allReduce(mem, 0, 1, DType.FLOAT64, ReduceOp.SUM, Algorithm.ONE_SHOT);
                return mem.local().get(ValueLayout.JAVA_DOUBLE, 0);
            }
        });
        assertEquals(List.of(4.5, 4.5, 4.5), sums);
    }

    @Test
    void aWorldWithoutATransportIsRefused() {
        assertThrows(NullPointerException.class, () -> InJvmWorld.create(2, GroupOptions.defaults(), null));
    }
}
