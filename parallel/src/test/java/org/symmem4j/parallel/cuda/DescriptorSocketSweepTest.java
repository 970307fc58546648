package org.symmem4j.parallel.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.ipc.FdChannel;

/**
 * The CUDA descriptor sockets (the Unix sockets over which cross-process ranks pass their memory's file descriptors) of
 * processes that are gone, where there is no GPU: a rank killed by SIGKILL cannot remove its own socket, which stayed in
 * the secrets' directory after a GPU shrink. Simulated here with a real socket file left under the name of a process
 * that has exited; the next bind (the next start) and the survivors' sweep ({@code CudaTransport.shrinking}) remove it,
 * and leave alone a live process's socket, a regular file of the same form, and the old name form of a live pid.
 */
class DescriptorSocketSweepTest {

    private static Path privateDir(Path tmp) throws IOException {
        return Files.createDirectory(tmp.resolve("secrets"), PosixFilePermissions.asFileAttribute(
                PosixFilePermissions.fromString("rwx------")));
    }

    /** A socket file left at {@code path}, as a process that bound it and was killed leaves it. */
    private static Path leftSocket(Path path) throws IOException {
        try (ServerSocketChannel s = ServerSocketChannel.open(StandardProtocolFamily.UNIX)) {
            s.bind(UnixDomainSocketAddress.of(path)); // closing does not unlink: the file stays, as after a kill
        }
        assertTrue(Files.readAttributes(path, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS).isOther(), path
                + " is a socket");
        return path;
    }

    /** The name a process that has exited had ({@link FdChannel#pathOf}'s form): its pid and start time. */
    private static Path nameOfAGoneProcess(Path dir, long instance) throws Exception {
        Process p = new ProcessBuilder("sleep", "30").start();
        long start = p.info().startInstant().orElseThrow().toEpochMilli(); // read while it runs
        long pid = p.pid();
        p.destroyForcibly();
        assertTrue(p.waitFor(30, TimeUnit.SECONDS), "sleep did not end");
        return dir.resolve(CrossProcessMemory.SOCKET_PREFIX + "-" + pid + "-" + start + "-" + instance + ".sock");
    }

    @Test
    void theNextBindAndTheSurvivorsSweepRemoveTheSocketsOfGoneProcessesOnly(@TempDir Path tmp) throws Exception {
        Path dir = privateDir(tmp);
        Path dead = leftSocket(nameOfAGoneProcess(dir, 1));
        Path live = leftSocket(FdChannel.pathOf(dir, CrossProcessMemory.SOCKET_PREFIX, 99)); // this process: alive
        Path oldFormLive = leftSocket(dir.resolve(CrossProcessMemory.SOCKET_PREFIX + "-" + ProcessHandle.current().pid()
                + "-98.sock"));
        Path regular = Files.writeString(nameOfAGoneProcess(dir, 2), "not a socket");
        Path other = leftSocket(dir.resolve("store-" + nameOfAGoneProcess(dir, 3).getFileName()));

        CrossProcessMemory memory = new CrossProcessMemory(null, 7, dir);
        assertEquals(0, memory.sweepStale(), "nothing bound yet: nothing looked at");
        assertTrue(Files.exists(dead, LinkOption.NOFOLLOW_LINKS));
        Path own = memory.channel().path(); // the next start: its first cross-process allocation binds
        try {
            assertEquals(FdChannel.pathOf(dir, CrossProcessMemory.SOCKET_PREFIX, 7), own);
            assertFalse(Files.exists(dead, LinkOption.NOFOLLOW_LINKS), "the gone process's socket is removed at bind");
            for (Path kept : new Path[] {live, oldFormLive, regular, other, own}) {
                assertTrue(Files.exists(kept, LinkOption.NOFOLLOW_LINKS), kept + " is kept");
            }
            // a rank dies after the bind: the survivors' shrink sweeps its socket
            Path deadLater = leftSocket(nameOfAGoneProcess(dir, 4));
            Path deadOldForm = leftSocket(dir.resolve(CrossProcessMemory.SOCKET_PREFIX + "-"
                    + nameOfAGoneProcess(dir, 5).getFileName().toString().split("-")[1] + "-5.sock"));
            assertEquals(2, memory.sweepStale(), "the sockets of the two gone processes");
            assertFalse(Files.exists(deadLater, LinkOption.NOFOLLOW_LINKS));
            assertFalse(Files.exists(deadOldForm, LinkOption.NOFOLLOW_LINKS), "the older name form, judged by its pid");
            for (Path kept : new Path[] {live, oldFormLive, regular, other, own}) {
                assertTrue(Files.exists(kept, LinkOption.NOFOLLOW_LINKS), kept + " is kept");
            }
        } finally {
            memory.close();
        }
        assertFalse(Files.exists(own, LinkOption.NOFOLLOW_LINKS), "closing removes its own socket");
    }
}
