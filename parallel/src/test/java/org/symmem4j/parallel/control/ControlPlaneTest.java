package org.symmem4j.parallel.control;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.CollectiveMismatchException;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.ReduceOp;
import org.symmem4j.parallel.control.OpDescriptorLayout.Descriptor;
import org.symmem4j.parallel.control.OpDescriptorLayout.Kind;
import org.symmem4j.parallel.control.OpDescriptorLayout.Problem;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * The control plane alone, on a pads-only memory of the group's host transport (as a GPU communicator
 * runs it): agreement passes, a disagreement or a rank's own problem throws the same message on every
 * rank before anything moves, and the plane stays usable after.
 */
class ControlPlaneTest {

    private static final GroupOptions OPTIONS = GroupOptions.defaults().withTimeout(Duration.ofSeconds(20));

    @Test
    void ranksThatAgreePassAndADisagreementThrowsTheSameMessageOnEveryRank() {
        List<String> messages = InJvmWorld.runOnEveryRank(3, OPTIONS, group -> {
            try (ControlPlane control = ControlPlane.open(group, group.hostTransport())) {
                for (int round = 0; round < 20; round++) {
                    control.checkAgreement("all-reduce", Kind.ALL_REDUCE, DType.FLOAT32, ReduceOp.SUM, Algorithm.TWO_SHOT,
                            -1, 1000 + round, 4000 + 4L * round, -1, 0, 0, null);
                    control.barrier();
                }
                long count = group.rank() == 1 ? 999 : 1000; // rank 1 passes another count
                CollectiveMismatchException e = assertThrows(CollectiveMismatchException.class,
                        () -> control.checkAgreement("all-reduce", Kind.ALL_REDUCE, DType.FLOAT32, ReduceOp.SUM,
                                Algorithm.TWO_SHOT, -1, count, 4000, -1, 0, 0, null));
                control.barrier(); // the group stays usable after a mismatch
                control.checkAgreement("broadcast", Kind.BROADCAST, DType.BFLOAT16, null, null, 0, 8, 16, -1, 0, 0, null);
                return e.getMessage();
            }
        });
        assertEquals(1, messages.stream().distinct().count(), messages::toString);
        String m = messages.getFirst();
        assertTrue(m.startsWith("all-reduce#40 arguments differ across ranks: rank=0 count=1000"), m);
        assertTrue(m.contains("rank=1 count=999 dtype=FLOAT32 op=SUM algorithm=TWO_SHOT"), m);
    }

    @Test
    void aProblemOneRankFoundIsRefusedOnEveryRankNamingIt() {
        List<String> messages = InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (ControlPlane control = ControlPlane.open(group, group.hostTransport())) {
                Problem mine = group.rank() == 0 ? Problem.NULL_BUFFER : null;
                CollectiveMismatchException e = assertThrows(CollectiveMismatchException.class,
                        () -> control.checkAgreement("reduce-scatter", Kind.REDUCE_SCATTER, DType.FLOAT32, ReduceOp.SUM,
                                null, -1, 16, 128, -1, 0, 64, mine));
                // a buffer too short for the count on one rank is refused the same way
                long recv = group.rank() == 1 ? 32 : 64;
                CollectiveMismatchException shortRecv = assertThrows(CollectiveMismatchException.class,
                        () -> control.checkAgreement("reduce-scatter", Kind.REDUCE_SCATTER, DType.FLOAT32, ReduceOp.SUM,
                                null, -1, 16, 128, -1, 0, recv, null));
                return e.getMessage() + "\n" + shortRecv.getMessage();
            }
        });
        assertEquals(messages.get(0), messages.get(1));
        String[] both = messages.getFirst().split("\n");
        assertTrue(both[0].startsWith("reduce-scatter#0 rejected: rank=0 "), both[0]);
        assertEquals("reduce-scatter#1 buffer too short for count=16 x FLOAT32 (4 bytes): rank=1 recvBytes=32 needed=64"
                + " (every rank's buffers must hold the count)", both[1]);
    }

    /**
     * With the recorder on (own-line, the default) a rank's own descriptor line is the recorder's entry: arrive()
     * writes it there and not into the rank's own pad, so the arguments are written once per collective, as with the
     * recorder off, which writes the pad's line (issue #36). The entry holds the arguments either way.
     */
    @Test
    void whileRecordingTheOwnLineIsTheRecordersEntryAndNotWrittenIntoTheOwnPad() {
        List<String> perRank = InJvmWorld.runOnEveryRank(2, OPTIONS, group -> {
            try (ControlPlane control = ControlPlane.open(group, group.hostTransport())) {
                control.checkAgreement("all-reduce", Kind.ALL_REDUCE, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT,
                        -1, 256, 1024, -1, 0, 0, null); // #0, recorded
                boolean padWhileOn = control.sync().published(0);
                String recorded = control.recorder().lastOps(1);
                control.recording().setRecording(false);
                control.checkAgreement("all-reduce", Kind.ALL_REDUCE, DType.FLOAT32, ReduceOp.SUM, Algorithm.ONE_SHOT,
                        -1, 256, 1024, -1, 0, 0, null); // #1, not recorded
                boolean padWhileOff = control.sync().published(1);
                return "pad while on=" + padWhileOn + " off=" + padWhileOff + "; " + recorded;
            }
        });
        assertEquals(List.of("pad while on=false off=true; all-reduce#0 COMPLETED",
                "pad while on=false off=true; all-reduce#0 COMPLETED"), perRank);
    }

    /**
     * Nothing records per collective that its entry barrier passed (the flight recorder's ticks, issue #36): a timeout
     * inside the collective, after every rank arrived, still says STARTED, found on the message path from the pads,
     * and one at the entry barrier says SCHEDULED.
     */
    @Test
    void aTimeoutPastTheEntryBarrierShowsTheCollectiveStartedInTheRecorder() throws Exception {
        CountDownLatch rank0Failed = new CountDownLatch(1);
        GroupOptions shortWaits = GroupOptions.defaults().withTimeout(Duration.ofMillis(800));
        List<String> perRank = InJvmWorld.runOnEveryRank(2, shortWaits, group -> {
            try (ControlPlane control = ControlPlane.open(group, group.hostTransport())) {
                long s = control.begin("all-reduce");
                control.enter(new Descriptor().set(s, Kind.ALL_REDUCE, DType.FLOAT32.ordinal(), ReduceOp.SUM.ordinal(),
                        Algorithm.TWO_SHOT.ordinal(), -1, 64, 256, -1, 0, 0, Problem.NONE));
                if (group.rank() == 1) {
                    // never reaches the collective's second barrier: rank 0 times out there, past the entry
                    assertTrue(rank0Failed.await(30, TimeUnit.SECONDS));
                    return "";
                }
                try {
                    PeerTimeoutException e = assertThrows(PeerTimeoutException.class,
                            () -> control.sync().barrier("all-reduce mid"));
                    return e.getMessage();
                } finally {
                    rank0Failed.countDown();
                }
            }
        });
        assertTrue(perRank.get(0).contains("this rank's last collectives: all-reduce#0 STARTED"), perRank.get(0));
    }
}
