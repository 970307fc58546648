package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * {@link RingBufferExample}: its log aggregation as rank threads and as launched processes, each producer's events
 * counted and sized as the generator says; and its aggregator's checks, fed lost, repeated and corrupted events.
 */
class RingBufferExampleTest {

    private static final int EVENTS = 3_000;
    /** A small ring (largest message 504 bytes): the producers meet a full ring often. */
    private static final int CAPACITY = 4_096;
    private static final int MAX_PAYLOAD = CAPACITY / 8 - 8;

    /** Bytes and events at the largest size of producer {@code rank}'s stream, from the generator alone. */
    private static long[] expectedStream(int rank, int events) {
        long bytes = 0;
        long atMax = 0;
        for (long seq = 0; seq < events; seq++) {
            int length = RingBufferExample.eventLength(rank, seq, MAX_PAYLOAD);
            bytes += length;
            atMax += length == MAX_PAYLOAD ? 1 : 0;
        }
        return new long[] {bytes, atMax};
    }

    @Test
    void threeRankThreadsAggregateEveryEventOfBothProducers() {
        List<RingBufferExample.Report> reports = InJvmWorld.runOnEveryRank(3, GroupOptions.defaults(),
                group -> RingBufferExample.run(group, EVENTS, CAPACITY));
        long bytes = 0;
        long atMax = 0;
        long fullWaits = 0;
        for (int r = 1; r <= 2; r++) {
            long[] expected = expectedStream(r, EVENTS);
            RingBufferExample.Report producer = reports.get(r);
            assertEquals(EVENTS, producer.events(), "producer " + r + " events");
            assertEquals(expected[0], producer.bytes(), "producer " + r + " bytes");
            assertEquals(expected[1], producer.eventsAtMaxPayload(), "producer " + r + " events at maxPayload");
            bytes += expected[0];
            atMax += expected[1];
            fullWaits += producer.fullWaits();
        }
        RingBufferExample.Report aggregator = reports.getFirst();
        assertEquals(2, aggregator.producers());
        assertEquals(2L * EVENTS, aggregator.events());
        assertEquals(bytes, aggregator.bytes());
        assertEquals(atMax, aggregator.eventsAtMaxPayload());
        assertTrue(atMax > 0 && atMax < 2L * EVENTS / 16, "about one event in 64 is exactly maxPayload: " + atMax);
        assertEquals(MAX_PAYLOAD, aggregator.maxPayload());
        assertEquals(fullWaits, aggregator.fullWaits(), "rank 0 reports the producers' own counts of a full ring");
        assertTrue(aggregator.line().startsWith("ring buffer: 2 producers sent 6000 log events (20..504 bytes, " + atMax
                + " at maxPayload) into a many-to-one ring of 4096 bytes on rank 0: every sequence complete and in"
                + " order"), aggregator.line());
        assertTrue(aggregator.line().contains(" " + bytes + " bytes in "), aggregator.line());
    }

    @Test
    void theAggregatorRefusesLostRepeatedAndCorruptedEvents() {
        MemorySegment event = MemorySegment.ofArray(new byte[MAX_PAYLOAD]);
        RingBufferExample.Aggregation aggregation = new RingBufferExample.Aggregation(2, MAX_PAYLOAD);
        int length = RingBufferExample.encodeEvent(event, 1, 0, MAX_PAYLOAD);
        aggregation.onMessage(RingBufferExample.EVENT, event, 0, length);
        assertEquals(1, aggregation.next[1]);
        assertEquals(length, aggregation.bytes[1]);

        IllegalStateException repeated = assertThrows(IllegalStateException.class,
                () -> aggregation.onMessage(RingBufferExample.EVENT, event, 0, length));
        assertEquals("log ring: producer 1 event seq=0 expected seq=1 (out of order or repeated)",
                repeated.getMessage());

        int lost = RingBufferExample.encodeEvent(event, 1, 2, MAX_PAYLOAD);
        IllegalStateException skipped = assertThrows(IllegalStateException.class,
                () -> aggregation.onMessage(RingBufferExample.EVENT, event, 0, lost));
        assertEquals("log ring: producer 1 event seq=2 expected seq=1 (events lost)", skipped.getMessage());

        int next = RingBufferExample.encodeEvent(event, 1, 1, MAX_PAYLOAD);
        long textByte = RingBufferExample.EVENT_HEADER_BYTES + 5;
        event.set(ValueLayout.JAVA_BYTE, textByte, (byte) (event.get(ValueLayout.JAVA_BYTE, textByte) ^ 1));
        IllegalStateException corrupted = assertThrows(IllegalStateException.class,
                () -> aggregation.onMessage(RingBufferExample.EVENT, event, 0, next));
        assertTrue(corrupted.getMessage().startsWith("log ring: producer 1 event seq=1 CRC-32C="),
                corrupted.getMessage());
        assertEquals(1, aggregation.next[1], "nothing of the refused events was counted");

        int fromRank3 = RingBufferExample.encodeEvent(event, 3, 0, MAX_PAYLOAD);
        IllegalStateException stranger = assertThrows(IllegalStateException.class,
                () -> aggregation.onMessage(RingBufferExample.EVENT, event, 0, fromRank3));
        assertEquals("log ring: event seq=0 from producer=3 expected 1..2", stranger.getMessage());
    }

    @Test
    void threeLaunchedProcessesAggregateAsRankZeroReports() throws IOException {
        String out = LaunchedJvm.launchRanksReportingFromRankZero(3, "256m", RingBufferExample.class,
                List.of("--events", Integer.toString(EVENTS), "--capacity", Integer.toString(CAPACITY)), "ring buffer");
        long bytes = expectedStream(1, EVENTS)[0] + expectedStream(2, EVENTS)[0];
        long atMax = expectedStream(1, EVENTS)[1] + expectedStream(2, EVENTS)[1];
        assertTrue(out.contains("[rank 0] ring buffer: 2 producers sent 6000 log events (20..504 bytes, " + atMax
                + " at maxPayload) into a many-to-one ring of 4096 bytes on rank 0: every sequence complete"), out);
        assertTrue(out.contains(" " + bytes + " bytes in "), out);
        assertTrue(out.contains("2 receipts sent back on one-to-one rings"), out);
    }
}
