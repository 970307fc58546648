package org.symmem4j.parallel.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.PeerTimeoutException;

/**
 * Descriptors passed over Unix datagram sockets ({@code SCM_RIGHTS}): the receiver gets its own
 * descriptor for the same open file (here a socket, compared by inode through /proc), messages are
 * sorted by tag and sender rank whatever order they come in, a sender that is not the expected
 * process of its rank is dropped, and a rank that never sends is named at the timeout.
 */
class FdChannelTest {

    private static final long ME = ProcessHandle.current().pid();

    /** What an open descriptor of this process refers to, e.g. {@code socket:[12345]}. */
    private static String target(int fd) throws IOException {
        return Files.readSymbolicLink(Path.of("/proc/self/fd/" + fd)).toString();
    }

    private static Path privateDir(Path tmp) throws IOException {
        return Files.createDirectory(tmp.resolve("p"), PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
    }

    /** A descriptor to pass: a socket of its own. */
    private static int someDescriptor() {
        LibC.Result r = LibC.socket(LibC.AF_UNIX, LibC.SOCK_DGRAM | LibC.SOCK_CLOEXEC, 0);
        assertTrue(!r.failed(), "socket: errno " + r.errno());
        return (int) r.value();
    }

    @Test
    void aPassedDescriptorRefersToTheSameOpenFile(@TempDir Path tmp) throws IOException {
        Path dir = privateDir(tmp);
        try (FdChannel a = FdChannel.bind(dir.resolve("a.sock")); FdChannel b = FdChannel.bind(dir.resolve("b.sock"))) {
            int fd = someDescriptor();
            try {
                a.send(b.path(), 7, 0, fd);
                Map<Integer, Integer> got = b.receiveFromEach(7, Map.of(0, ME), Duration.ofSeconds(10));
                int received = got.get(0);
                assertNotEquals(fd, received, "the receiver owns a new descriptor");
                assertEquals(target(fd), target(received), "for the same open file");
                FdChannel.closeDescriptor(received);
            } finally {
                FdChannel.closeDescriptor(fd);
            }
        }
        assertTrue(!Files.exists(dir.resolve("a.sock")) && !Files.exists(dir.resolve("b.sock")), "closing removes the sockets");
    }

    @Test
    void messagesAreSortedByTagAndRank(@TempDir Path tmp) throws IOException {
        Path dir = privateDir(tmp);
        try (FdChannel rx = FdChannel.bind(dir.resolve("rx.sock")); FdChannel tx = FdChannel.bind(dir.resolve("tx.sock"))) {
            int[] fds = {someDescriptor(), someDescriptor(), someDescriptor()};
            try {
                tx.send(rx.path(), 2, 1, fds[0]); // tag 2 first, though tag 1 is asked for first
                tx.send(rx.path(), 1, 2, fds[1]);
                tx.send(rx.path(), 1, 1, fds[2]);
                Map<Integer, Integer> one = rx.receiveFromEach(1, Map.of(1, ME, 2, ME), Duration.ofSeconds(10));
                assertEquals(target(fds[2]), target(one.get(1)));
                assertEquals(target(fds[1]), target(one.get(2)));
                Map<Integer, Integer> two = rx.receiveFromEach(2, Map.of(1, ME), Duration.ofSeconds(10));
                assertEquals(target(fds[0]), target(two.get(1)));
                List.of(one.get(1), one.get(2), two.get(1)).forEach(FdChannel::closeDescriptor);
            } finally {
                for (int fd : fds) {
                    FdChannel.closeDescriptor(fd);
                }
            }
        }
    }

    @Test
    void aSenderThatIsNotTheRanksProcessIsDroppedAndTheRankNamedAtTheTimeout(@TempDir Path tmp) throws IOException {
        Path dir = privateDir(tmp);
        try (FdChannel rx = FdChannel.bind(dir.resolve("rx.sock")); FdChannel tx = FdChannel.bind(dir.resolve("tx.sock"))) {
            int fd = someDescriptor();
            try {
                tx.send(rx.path(), 5, 0, fd); // comes from this process, but rank 0 is expected to be pid 1
                PeerTimeoutException e = assertThrows(PeerTimeoutException.class,
                        () -> rx.receiveFromEach(5, Map.of(0, 1L, 3, ME), Duration.ofMillis(300)));
                assertEquals(List.of(0, 3), e.missingRanks());
                assertTrue(e.getMessage().contains("tag=5 no descriptor from ranks [0, 3]"), e.getMessage());
            } finally {
                FdChannel.closeDescriptor(fd);
            }
        }
    }

    @Test
    void aPathTooLongForASocketIsRefusedSayingSo(@TempDir Path tmp) {
        Path longPath = tmp.resolve("x".repeat(120) + ".sock");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> FdChannel.bind(longPath));
        assertTrue(e.getMessage().contains("expected at most 107"), e.getMessage());
    }
}
