package org.symmem4j.state;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DeviceCommunicator;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.cuda.CudaThreadRanksTestBase;
import org.symmem4j.parallel.cuda.GpuTestWatchdog;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The ring buffer in GPU memory ({@link DeviceRingBuffer}), ranks as threads sharing GPU 0 where there is one GPU:
 * messages whose bytes a copy on the producer's stream writes just before the append (no host synchronize in
 * between) arrive in order with exact bytes, across several wraps of the ring; a full ring refuses an offer and
 * drops a timed-out append (reported by flush, naming the consumer); an oversized message and a type below 1 are
 * refused; many-to-one from two (or more) producers racing on TAIL (atomicCAS at system scope) and the consumer
 * itself, three ranks at least.
 * Payload byte {@code j} of message {@code i} of rank {@code r} is {@code (r * 131 + i * 31 + j * 7) & 0xFF}.
 * Skipped without a GPU.
 */
@ExtendWith(GpuTestWatchdog.class)
class CudaSymmetricRingBufferTest extends CudaThreadRanksTestBase {


    private static byte[] payload(int rank, int message, int length) {
        byte[] b = new byte[length];
        for (int j = 0; j < length; j++) {
            b[j] = (byte) (rank * 131 + message * 31 + j * 7);
        }
        return b;
    }

    /** Lengths that cover 0, unaligned, aligned and the largest, in a cycle. */
    private static int length(int message, int maxPayload) {
        int[] cycle = {0, 1, 7, 8, 9, 63, maxPayload, 200 % (maxPayload + 1), 5, maxPayload - 1};
        return cycle[message % cycle.length];
    }

    /** Copies host bytes to a fresh device buffer (synchronously). */
    private static MemorySegment onDevice(DeviceCommunicator gpu, byte[] bytes) {
        MemorySegment d = gpu.allocateDevice(Math.max(1, bytes.length));
        if (bytes.length > 0) {
            try (Arena a = Arena.ofConfined()) {
                MemorySegment host = a.allocate(bytes.length);
                MemorySegment.copy(bytes, 0, host, java.lang.foreign.ValueLayout.JAVA_BYTE, 0, bytes.length);
                gpu.copyFromHost(d, host);
            }
        }
        return d.asSlice(0, bytes.length);
    }

    /** A received message: type and the payload copied back to the host. */
    private record Received(int type, byte[] bytes) {
    }

    /** A handler that copies each payload (device memory, in place in the ring) to the host before it returns. */
    private static MessageHandler collect(DeviceCommunicator gpu, List<Received> into) {
        return (type, buffer, offset, length) -> {
            byte[] bytes = new byte[length];
            if (length > 0) {
                try (Arena a = Arena.ofConfined()) {
                    MemorySegment host = a.allocate(length);
                    gpu.copyToHost(host, buffer.asSlice(offset, length));
                    MemorySegment.copy(host, java.lang.foreign.ValueLayout.JAVA_BYTE, 0, bytes, 0, length);
                }
            }
            into.add(new Received(type, bytes));
        };
    }

    @Test
    void oneToOneMessagesProducedOnTheStreamArriveInOrderWithExactBytes() {
        int capacity = 4096;
        int messages = 300; // about 16 laps of the ring: padding at the end, waits for room on the GPU
        InJvmWorld.runOnEveryRank(2, OPTIONS, gpuTransport(), group -> {
            try (Communicator comm = Communicator.create(group)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                UnsupportedOperationException host = assertThrows(UnsupportedOperationException.class,
                        () -> SymmetricRingBuffer.oneToOne(group, 1, 0, capacity));
                assertTrue(host.getMessage().contains("DeviceRingBuffer"), host.getMessage());
                try (DeviceRingBuffer ring = DeviceRingBuffer.oneToOne(comm, 1, 0, capacity)) {
                    int max = ring.maxPayload();
                    assertEquals(capacity / 8 - 8, max);
                    if (group.rank() == 1) {
                        // the sources: message i at its own slice; a copy ON THE STREAM writes it just before the
                        // append, so the append must see the copy's bytes without any host synchronize
                        List<MemorySegment> staged = new ArrayList<>();
                        List<MemorySegment> sources = new ArrayList<>();
                        for (int i = 0; i < messages; i++) {
                            staged.add(onDevice(gpu, payload(1, i, length(i, max))));
                            sources.add(onDevice(gpu, new byte[length(i, max)])); // zeros until the copy
                        }
                        for (int i = 0; i < messages; i++) {
                            if (sources.get(i).byteSize() > 0) {
                                gpu.copyAsync(sources.get(i), staged.get(i));
                            }
                            ring.putAsync(1 + i % 5, sources.get(i));
                        }
                        ring.flush(); // nothing dropped: the consumer polls while the kernels wait for room
                        for (int i = 0; i < messages; i++) {
                            gpu.freeDevice(staged.get(i));
                            gpu.freeDevice(sources.get(i));
                        }
                        assertThrows(IllegalStateException.class, () -> ring.poll((t, b, o, l) -> { }, 1));
                    } else {
                        List<Received> got = new ArrayList<>();
                        MessageHandler handler = collect(gpu, got);
                        while (got.size() < messages) {
                            ring.take(handler, 16);
                        }
                        assertEquals(messages, got.size());
                        for (int i = 0; i < messages; i++) {
                            assertEquals(1 + i % 5, got.get(i).type(), "type of message " + i);
                            assertArrayEquals(payload(1, i, length(i, max)), got.get(i).bytes(), "bytes of message " + i);
                        }
                        assertEquals(0, ring.poll(handler, 16), "nothing after the last message");
                        MemorySegment one = gpu.allocateDevice(8);
                        assertThrows(IllegalStateException.class, () -> ring.putAsync(1, one));
                        gpu.freeDevice(one);
                    }
                    hostBarrier(group, "one-to-one-done");
                }
            }
            return null;
        });
    }

    @Test
    void aFullRingBackPressuresAndAnOversizedMessageIsRefused() {
        int capacity = 256; // maxPayload 24: a 24-byte message is a 32-byte record, eight fill the ring
        InJvmWorld.runOnEveryRank(2, OPTIONS, gpuTransport(), group -> {
            try (Communicator comm = Communicator.create(group);
                 DeviceRingBuffer ring = DeviceRingBuffer.oneToOne(comm, 1, 0, capacity)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                List<MemorySegment> sources = new ArrayList<>();
                for (int i = 0; i < 12; i++) {
                    sources.add(onDevice(gpu, payload(1, i, 24)));
                }
                if (group.rank() == 1) {
                    MemorySegment big = gpu.allocateDevice(25);
                    IllegalArgumentException over = assertThrows(IllegalArgumentException.class,
                            () -> ring.putAsync(1, big));
                    assertTrue(over.getMessage().contains("maxPayload=24") && over.getMessage().contains("fix:"),
                            over.getMessage());
                    assertThrows(IllegalArgumentException.class, () -> ring.offer(1, big));
                    assertThrows(IllegalArgumentException.class, () -> ring.putAsync(0, sources.get(0)));
                    gpu.freeDevice(big);
                    // the consumer does not poll yet: exactly eight records fit, the ninth is refused
                    for (int i = 0; i < 8; i++) {
                        assertTrue(ring.offer(1, sources.get(i)), "offer " + i + " into a ring with room");
                    }
                    assertFalse(ring.offer(1, sources.get(8)), "the ninth offer into a full ring");
                    // two appends on the stream find no room within their wait: both dropped, none written
                    ring.putAsync(1, sources.get(8), Duration.ofMillis(200));
                    ring.putAsync(1, sources.get(9), Duration.ofMillis(200));
                    PeerTimeoutException full = assertThrows(PeerTimeoutException.class, ring::flush);
                    assertEquals(List.of(0), full.missingRanks(), full.getMessage());
                    assertTrue(full.getMessage().contains("dropped=2"), full.getMessage());
                    ring.flush(); // reported once; the ring takes appends again
                }
                hostBarrier(group, "filled");
                if (group.rank() == 0) {
                    List<Received> got = new ArrayList<>();
                    MessageHandler handler = collect(gpu, got);
                    while (got.size() < 8) {
                        ring.take(handler, 16);
                    }
                    assertEquals(8, got.size(), "the eight that fit, not the dropped ones");
                    for (int i = 0; i < 8; i++) {
                        assertArrayEquals(payload(1, i, 24), got.get(i).bytes(), "message " + i);
                    }
                }
                hostBarrier(group, "drained");
                if (group.rank() == 1) {
                    ring.putAsync(2, sources.get(10));
                    assertTrue(ring.offer(3, sources.get(11)), "room again after the consumer freed it");
                    ring.flush();
                } else {
                    List<Received> got = new ArrayList<>();
                    MessageHandler handler = collect(gpu, got);
                    while (got.size() < 2) {
                        ring.take(handler, 16);
                    }
                    assertEquals(2, got.get(0).type());
                    assertArrayEquals(payload(1, 10, 24), got.get(0).bytes());
                    assertEquals(3, got.get(1).type());
                    assertArrayEquals(payload(1, 11, 24), got.get(1).bytes());
                }
                hostBarrier(group, "again");
                for (MemorySegment s : sources) {
                    gpu.freeDevice(s);
                }
            }
            return null;
        });
    }

    /**
     * On a GPU group the host hash map is refused naming its GPU form ({@link DeviceHashMap}), and what has no GPU form
     * (the parameter cache) is refused with the reason; before anything is allocated, on every rank.
     */
    @Test
    void theHostHashMapAndTheParameterCacheNameTheirGpuFormsOnAGpuGroup() {
        InJvmWorld.runOnEveryRank(2, OPTIONS, gpuTransport(), group -> {
            UnsupportedOperationException map = assertThrows(UnsupportedOperationException.class,
                    () -> SymmetricHashMap.create(group, 8, 8, 64));
            assertTrue(map.getMessage().contains("GPU memory") && map.getMessage().contains("DeviceHashMap.create")
                    && map.getMessage().contains("fix:"), map.getMessage());
            UnsupportedOperationException cache = assertThrows(UnsupportedOperationException.class,
                    () -> ParameterCache.create(group, 1 << 20, 16));
            assertTrue(cache.getMessage().contains("GPU memory")
                    && cache.getMessage().contains("DeviceParameterCache.create")
                    && cache.getMessage().contains("fix:"), cache.getMessage());
            return null;
        });
    }

    @Test
    void manyToOneProducersRaceOnTheTailAndEachOneKeepsItsOrder() {
        int capacity = 8192;
        int perProducer = 200;
        int own = 10; // the consumer's own messages, appended (and flushed) before the others start
        // at least two producers besides the consumer, so that two race on TAIL; -Dsymmem4j.test.cudaRanks=N for more
        int world = Math.max(3, Integer.getInteger("symmem4j.test.cudaRanks", 3));
        InJvmWorld.runOnEveryRank(world, OPTIONS, gpuTransport(), group -> {
            int me = group.rank();
            try (Communicator comm = Communicator.create(group);
                 DeviceRingBuffer ring = DeviceRingBuffer.manyToOne(comm, 0, capacity)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                int max = ring.maxPayload();
                int count = me == 0 ? own : perProducer;
                List<MemorySegment> sources = new ArrayList<>();
                for (int i = 0; i < count; i++) {
                    sources.add(onDevice(gpu, payload(me, i, length(i, max))));
                }
                if (me == 0) {
                    for (int i = 0; i < own; i++) {
                        ring.putAsync(1, sources.get(i));
                    }
                    ring.flush(); // they fit: the others have not started
                }
                hostBarrier(group, "consumer-appended");
                if (me != 0) {
                    for (int i = 0; i < perProducer; i++) {
                        ring.putAsync(me + 1, sources.get(i));
                    }
                    ring.flush();
                } else {
                    List<Received> got = new ArrayList<>();
                    MessageHandler handler = collect(gpu, got);
                    int total = own + (world - 1) * perProducer;
                    while (got.size() < total) {
                        ring.take(handler, 32);
                    }
                    assertEquals(total, got.size());
                    int[] next = new int[world];
                    for (Received r : got) {
                        int from = r.type() - 1;
                        int i = next[from]++;
                        assertArrayEquals(payload(from, i, length(i, max)), r.bytes(),
                                "message " + i + " of rank " + from + " (in its order)");
                    }
                    int[] expected = new int[world];
                    java.util.Arrays.fill(expected, perProducer);
                    expected[0] = own;
                    assertArrayEquals(expected, next, "messages per rank");
                }
                hostBarrier(group, "many-done");
                for (MemorySegment s : sources) {
                    gpu.freeDevice(s);
                }
            }
            return null;
        });
    }

    /**
     * A timeout far longer than these tests (and an append's wait as long): a wait that ends does so because its peer
     * began closing the ring (PEER_LEFT), not because time ran out (which would fail the assertions on the reason).
     */
    private static final GroupOptions PATIENT = GroupOptions.defaults().withTimeout(Duration.ofMinutes(5));

    @Test
    void takeStopsAtOnceWhenTheOneProducerClosesTheRingAfterItsLastAppend() {
        AtomicReference<PeerTimeoutException> seen = new AtomicReference<>();
        List<Integer> got = InJvmWorld.runOnEveryRank(2, PATIENT, gpuTransport(), group -> {
            int received = 0;
            try (Communicator comm = Communicator.create(group);
                 DeviceRingBuffer ring = DeviceRingBuffer.oneToOne(comm, 1, 0, 4096)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                if (group.rank() == 1) {
                    MemorySegment src = onDevice(gpu, payload(1, 0, 24));
                    ring.putAsync(7, src); // no flush: the close waits for the stream before it marks the ring
                    ring.close();
                    gpu.freeDevice(src);
                } else {
                    List<Received> messages = new ArrayList<>();
                    // the message appended before the close is still handed out, even if the close came first
                    received = ring.take(collect(gpu, messages), 16);
                    assertEquals(7, messages.get(0).type());
                    assertArrayEquals(payload(1, 0, 24), messages.get(0).bytes());
                    try {
                        ring.take((type, buf, off, len) -> { }, 16);
                    } catch (PeerTimeoutException e) {
                        seen.set(e);
                    }
                }
            }
            return received;
        });
        assertEquals(List.of(1, 0), got);
        PeerLeftAssert.assertPeerLeft(seen.get(), "the second take must stop: the producer closed the ring", 0,
                List.of(1), "device ring buffer take", "producer rank=1");
    }

    @Test
    void anAppendWaitingForRoomStopsWhenTheConsumerClosesTheRing() {
        int capacity = 1024; // 32 records of 24 payload bytes fill it exactly
        AtomicReference<PeerTimeoutException> seen = new AtomicReference<>();
        InJvmWorld.runOnEveryRank(2, PATIENT, gpuTransport(), group -> {
            try (Communicator comm = Communicator.create(group)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                MemorySegment src = onDevice(gpu, payload(1, 0, 24));
                try (DeviceRingBuffer ring = DeviceRingBuffer.oneToOne(comm, 1, 0, capacity)) {
                    if (group.rank() == 1) {
                        for (int i = 0; i < 40; i++) {
                            ring.putAsync(1, src, Duration.ofMinutes(5)); // the 33rd waits on the GPU for room
                        }
                        hostBarrier(group, "enqueued");
                        try {
                            ring.flush();
                        } catch (PeerTimeoutException e) {
                            seen.set(e);
                        }
                    } else {
                        hostBarrier(group, "enqueued"); // then close without polling: no room will be freed
                    }
                }
                gpu.freeDevice(src);
            }
            return null;
        });
        PeerLeftAssert.assertPeerLeft(seen.get(), "flush must report the appends the consumer's close ended", 1,
                List.of(0), "device ring buffer put", "dropped=8");
    }

    @Test
    void aManyToOneTakeStopsOnlyOnceEveryOtherRankClosedTheRing() {
        AtomicReference<PeerTimeoutException> seen = new AtomicReference<>();
        CountDownLatch firstTaken = new CountDownLatch(1);
        List<Integer> got = InJvmWorld.runOnEveryRank(3, PATIENT, gpuTransport(), group -> {
            int received = 0;
            try (Communicator comm = Communicator.create(group)) {
                DeviceCommunicator gpu = comm.unwrap(DeviceCommunicator.class).orElseThrow();
                MemorySegment src = onDevice(gpu, payload(group.rank(), 0, 8));
                try (DeviceRingBuffer ring = DeviceRingBuffer.manyToOne(comm, 0, 4096)) {
                    if (group.rank() == 2) {
                        // rank 1 appended and began closing: the consumer's take, on an empty ring now, must wait
                        // for this rank, which has not closed
                        assertTrue(firstTaken.await(60, TimeUnit.SECONDS));
                    }
                    if (group.rank() != 0) {
                        ring.putAsync(group.rank() + 1, src); // then the close (waits for the stream, marks the ring)
                    } else {
                        MessageHandler none = (type, buf, off, len) -> { };
                        received += ring.take(none, 16);
                        firstTaken.countDown();
                        received += ring.take(none, 16);
                        try {
                            ring.take(none, 16);
                        } catch (PeerTimeoutException e) {
                            seen.set(e);
                        }
                    }
                }
                gpu.freeDevice(src);
            }
            return received;
        });
        assertEquals(List.of(2, 0, 0), got);
        PeerLeftAssert.assertPeerLeft(seen.get(), "the third take must stop: both producers closed the ring", 0,
                List.of(1, 2), "device ring buffer take", "any of ranks [1, 2]", "(all of them)");
    }
}
