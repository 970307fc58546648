package org.symmem4j.parallel.ipc;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.symmem4j.parallel.PeerTimeoutException;
import org.symmem4j.parallel.SymmemException;
import org.symmem4j.parallel.sync.ProcessLiveness;

/**
 * Hands file descriptors from process to process, as PyTorch's symmetric memory does for CUDA
 * allocations: each process binds a Unix-domain datagram socket at a path of its own, in a directory
 * only its user may enter, and a sender passes a descriptor with {@code SCM_RIGHTS}, so the receiver
 * gets its own descriptor for the same open file (a CUDA allocation exported as a file descriptor,
 * say). Every message says under which tag and from which rank; the kernel adds who really sent it
 * ({@code SO_PASSCRED}: its pid and uid), and a message from anyone but the expected process of that
 * rank is dropped, its descriptor closed, and logged. Datagrams on a Unix socket are not lost or
 * reordered between two processes; a message for a tag nobody waits for yet is kept until someone does.
 *
 * <p>Thread-safe: sends need no lock; receivers take turns, each keeping what it reads for others.
 */
public final class FdChannel implements AutoCloseable {

    private static final Logger LOG = LoggerFactory.getLogger(FdChannel.class);

    /**
     * The payload of a message:
     * <pre>
     *   0  long  tag          which exchange (an allocation's id, say)
     *   8  int   senderRank   the sender's rank in the group that exchanges
     *  12  int   magic        {@link #MAGIC}, so that stray datagrams are told apart
     * </pre>
     */
    private static final int PAYLOAD_BYTES = 16;
    private static final int MAGIC = 0x53594d46; // "SYMF"
    /** Control space: one descriptor (CMSG_SPACE(4) = 24) and the credentials (CMSG_SPACE(12) = 32), with room. */
    private static final int CONTROL_BYTES = 128;

    private final Path path;
    private final int socket;
    private final int uid = LibC.getuid();
    /** Descriptors read but not yet taken, by tag and sender rank. */
    private final Map<Long, Map<Integer, Arrived>> pending = new HashMap<>();
    private boolean closed;

    private record Arrived(int fd, long pid) {
    }

    private FdChannel(Path path, int socket) {
        this.path = path;
        this.socket = socket;
    }

    /**
     * Binds a channel at {@code path}, which must lie in a directory only this user may enter (the
     * socket is reachable by anyone who can reach the path). A file left at the path is replaced: the
     * path should name this process (its pid), so only a dead process of the same pid can have left it.
     *
     * @param path where the socket lives; at most 107 bytes
     * @return the bound channel
     * @throws SymmemException when the socket cannot be made or bound
     * @throws IllegalArgumentException when the path is too long for a Unix socket
     */
    public static FdChannel bind(Path path) {
        byte[] name = path.toString().getBytes(StandardCharsets.UTF_8);
        if (name.length >= LibC.SUN_PATH_BYTES) {
            throw new IllegalArgumentException("socket path " + path + " has " + name.length + " bytes, expected at most "
                    + (LibC.SUN_PATH_BYTES - 1) + " (a Unix socket's limit; fix: point -Dsymmem4j.secret.dir or"
                    + " XDG_RUNTIME_DIR"
                    + " at a shorter directory)");
        }
        try {
            Files.deleteIfExists(path);
        } catch (java.io.IOException e) {
            throw new SymmemException("cannot remove " + path + " to bind a socket there: " + e + " (fix: remove it by"
                    + " hand, or make its directory writable by this user)", e);
        }
        LibC.Result s = LibC.socket(LibC.AF_UNIX, LibC.SOCK_DGRAM | LibC.SOCK_CLOEXEC, 0);
        check(s, "socket(AF_UNIX, SOCK_DGRAM)");
        int fd = (int) s.value();
        try (Arena a = Arena.ofConfined()) {
            MemorySegment address = sockaddr(a, name);
            check(LibC.bind(fd, address, (int) address.byteSize()), "bind(" + path + ")");
            MemorySegment one = a.allocate(ValueLayout.JAVA_INT);
            one.set(ValueLayout.JAVA_INT, 0, 1);
            check(LibC.setsockopt(fd, LibC.SOL_SOCKET, LibC.SO_PASSCRED, one, 4), "setsockopt(SO_PASSCRED)");
        } catch (RuntimeException e) {
            LibC.close(fd);
            throw e;
        }
        return new FdChannel(path, fd);
    }

    /**
     * Where this process binds its channel {@code instance} in {@code dir}:
     * {@code <prefix>-<pid>-<startMillis>-<instance>.sock}, a name that records the process (its pid and start time, 0
     * when unknown), so that {@link #sweepStale} can tell the socket of a process that is gone from a live one's.
     *
     * @param dir      a directory only this user may enter
     * @param prefix   what the sockets of one kind start with (letters and digits), e.g. {@code cuda}
     * @param instance tells apart the channels of one process (e.g. one per transport)
     * @return the path
     */
    public static Path pathOf(Path dir, String prefix, long instance) {
        ProcessHandle me = ProcessHandle.current();
        long start = me.info().startInstant().map(Instant::toEpochMilli).orElse(0L);
        return dir.resolve(prefix + "-" + me.pid() + "-" + start + "-" + instance + ".sock");
    }

    /**
     * Removes the sockets in {@code dir} that {@link #pathOf} named with {@code prefix} for processes that are gone: a
     * process killed by SIGKILL cannot remove its own, and it would stay in the directory until the next boot. Only
     * sockets (not regular files, directories or links) whose name parses are touched, and only when their process is
     * known gone (its pid no longer runs, or runs a process started at another time); names of the older form {@code
     * <prefix>-<pid>-<instance>.sock} are judged by the pid alone. Bounded: one listing of {@code dir} and one look at
     * {@code /proc} per socket, no waiting.
     *
     * @param dir    the directory of the sockets
     * @param prefix their prefix, as given to {@link #pathOf}
     * @return how many were removed
     */
    public static int sweepStale(Path dir, String prefix) {
        Pattern name = Pattern.compile(Pattern.quote(prefix)
                + "-(\\d{1,19})-(?:(\\d{1,19})-)?\\d{1,19}\\.sock");
        int removed = 0;
        try (DirectoryStream<Path> files = Files.newDirectoryStream(dir, prefix + "-*.sock")) {
            for (Path p : files) {
                Matcher m = name.matcher(p.getFileName().toString());
                try {
                    if (!m.matches() || !Files.readAttributes(p, BasicFileAttributes.class,
                            LinkOption.NOFOLLOW_LINKS).isOther()) {
                        continue; // not one of ours, or not a socket
                    }
                    long pid = Long.parseLong(m.group(1));
                    long start = m.group(2) == null ? 0 : Long.parseLong(m.group(2));
                    if (!ProcessLiveness.isRunning(pid, start) && Files.deleteIfExists(p)) {
                        removed++;
                        LOG.debug("fd channel: removed {}, left by process {} which is gone", p, pid);
                    }
                } catch (IOException | NumberFormatException e) {
                    // gone already (another process swept it), or unreadable: left for the next sweep
                }
            }
        } catch (IOException e) {
            // no directory, or not listable: nothing to sweep
        }
        return removed;
    }

    /**
     * Where this channel receives.
     *
     * @return the socket's path
     */
    public Path path() {
        return path;
    }

    /**
     * Sends a duplicate of {@code fd} to the channel at {@code peer}; the caller keeps its own.
     *
     * @param peer       the receiving channel's path
     * @param tag        which exchange this belongs to
     * @param senderRank this process's rank in the exchanging group
     * @param fd         the descriptor to pass
     * @throws SymmemException when the send fails (no such socket: the peer is gone or never bound)
     */
    public void send(Path peer, long tag, int senderRank, int fd) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment payload = a.allocate(PAYLOAD_BYTES, 8);
            payload.set(ValueLayout.JAVA_LONG, 0, tag);
            payload.set(ValueLayout.JAVA_INT, 8, senderRank);
            payload.set(ValueLayout.JAVA_INT, 12, MAGIC);
            MemorySegment iov = a.allocate(LibC.IOVEC_BYTES, 8);
            iov.set(ValueLayout.ADDRESS, 0, payload);
            iov.set(ValueLayout.JAVA_LONG, 8, PAYLOAD_BYTES);
            long controlBytes = LibC.CMSG_HEADER_BYTES + 8; // CMSG_SPACE(sizeof(int))
            MemorySegment control = a.allocate(controlBytes, 8);
            control.set(ValueLayout.JAVA_LONG, 0, LibC.CMSG_HEADER_BYTES + 4); // CMSG_LEN(sizeof(int))
            control.set(ValueLayout.JAVA_INT, 8, LibC.SOL_SOCKET);
            control.set(ValueLayout.JAVA_INT, 12, LibC.SCM_RIGHTS);
            control.set(ValueLayout.JAVA_INT, LibC.CMSG_HEADER_BYTES, fd);
            byte[] name = peer.toString().getBytes(StandardCharsets.UTF_8);
            MemorySegment address = sockaddr(a, name);
            MemorySegment msg = a.allocate(LibC.MSGHDR_BYTES, 8);
            msg.set(ValueLayout.ADDRESS, LibC.MSG_NAME, address);
            msg.set(ValueLayout.JAVA_INT, LibC.MSG_NAMELEN, (int) address.byteSize());
            msg.set(ValueLayout.ADDRESS, LibC.MSG_IOV, iov);
            msg.set(ValueLayout.JAVA_LONG, LibC.MSG_IOVLEN, 1);
            msg.set(ValueLayout.ADDRESS, LibC.MSG_CONTROL, control);
            msg.set(ValueLayout.JAVA_LONG, LibC.MSG_CONTROLLEN, controlBytes);
            LibC.Result r;
            do {
                r = LibC.sendmsg(socket, msg, 0);
            } while (r.failed() && r.errno() == LibC.EINTR);
            check(r, "sendmsg(fd=" + fd + " to " + peer + ")");
        }
    }

    /**
     * Waits for one descriptor under {@code tag} from each rank in {@code expectedPids} (rank to the
     * pid that rank's process has); returns them by rank. A message whose sender is not that process
     * (another process of this user: a stray or a stranger) is dropped.
     *
     * @param tag          which exchange
     * @param expectedPids the ranks to hear from and their processes' pids
     * @param timeout      how long to wait for all of them
     * @return rank to a descriptor this process now owns (close it when done)
     * @throws PeerTimeoutException naming the ranks not heard from when the timeout passes
     */
    public synchronized Map<Integer, Integer> receiveFromEach(long tag, Map<Integer, Long> expectedPids, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        Map<Integer, Integer> got = new TreeMap<>();
        while (true) {
            Map<Integer, Arrived> waiting = pending.getOrDefault(tag, Map.of());
            for (Map.Entry<Integer, Long> e : expectedPids.entrySet()) {
                Arrived a = waiting.get(e.getKey());
                if (a != null && !got.containsKey(e.getKey())) {
                    if (a.pid() == e.getValue()) {
                        got.put(e.getKey(), a.fd());
                    } else {
                        LOG.warn("fd channel {}: tag={} rank={} came from pid={}, expected pid={}: dropped", path, tag,
                                e.getKey(), a.pid(), e.getValue());
                        LibC.close(a.fd());
                    }
                    waiting.remove(e.getKey());
                }
            }
            if (got.size() == expectedPids.size()) {
                if (waiting.isEmpty()) {
                    pending.remove(tag);
                }
                return got;
            }
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                List<Integer> missing = new ArrayList<>();
                for (int r : new java.util.TreeSet<>(expectedPids.keySet())) { // in rank order, whatever the map's
                    if (!got.containsKey(r)) {
                        missing.add(r);
                    }
                }
                for (int fd : got.values()) {
                    LibC.close(fd);
                }
                throw new PeerTimeoutException("fd channel " + path + ": tag=" + tag + " no descriptor from ranks " + missing
                        + " within " + timeout + " (fix: see those ranks' own errors, or raise symmem4j.timeout.ms if they"
                        + " lag)", -1, missing, "receive descriptors", PeerTimeoutException.Reason.DEADLINE_PASSED,
                        timeout);
            }
            receiveOne(left);
        }
    }

    /** Reads one message, waiting at most {@code nanos}, into {@link #pending}; drops what is not ours. */
    private void receiveOne(long nanos) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment timeval = a.allocate(16, 8);
            long micros = Math.max(1000, nanos / 1000);
            timeval.set(ValueLayout.JAVA_LONG, 0, micros / 1_000_000);
            timeval.set(ValueLayout.JAVA_LONG, 8, micros % 1_000_000);
            check(LibC.setsockopt(socket, LibC.SOL_SOCKET, LibC.SO_RCVTIMEO, timeval, 16), "setsockopt(SO_RCVTIMEO)");
            MemorySegment payload = a.allocate(PAYLOAD_BYTES, 8);
            MemorySegment iov = a.allocate(LibC.IOVEC_BYTES, 8);
            iov.set(ValueLayout.ADDRESS, 0, payload);
            iov.set(ValueLayout.JAVA_LONG, 8, PAYLOAD_BYTES);
            MemorySegment control = a.allocate(CONTROL_BYTES, 8);
            MemorySegment msg = a.allocate(LibC.MSGHDR_BYTES, 8);
            msg.set(ValueLayout.ADDRESS, LibC.MSG_IOV, iov);
            msg.set(ValueLayout.JAVA_LONG, LibC.MSG_IOVLEN, 1);
            msg.set(ValueLayout.ADDRESS, LibC.MSG_CONTROL, control);
            msg.set(ValueLayout.JAVA_LONG, LibC.MSG_CONTROLLEN, CONTROL_BYTES);
            LibC.Result r = LibC.recvmsg(socket, msg, LibC.MSG_CMSG_CLOEXEC);
            if (r.failed()) {
                if (r.errno() == LibC.EAGAIN || r.errno() == LibC.EINTR) {
                    return; // the timeout passed (the caller checks its deadline), or a signal
                }
                check(r, "recvmsg on " + path);
            }
            // the control messages: descriptors (SCM_RIGHTS) and the sender's credentials (SCM_CREDENTIALS)
            List<Integer> fds = new ArrayList<>();
            long pid = -1;
            long senderUid = -1;
            long controlLength = msg.get(ValueLayout.JAVA_LONG, LibC.MSG_CONTROLLEN);
            long at = 0;
            while (at + LibC.CMSG_HEADER_BYTES <= controlLength) {
                long length = control.get(ValueLayout.JAVA_LONG, at);
                int level = control.get(ValueLayout.JAVA_INT, at + 8);
                int type = control.get(ValueLayout.JAVA_INT, at + 12);
                if (length < LibC.CMSG_HEADER_BYTES || at + length > controlLength) {
                    break;
                }
                if (level == LibC.SOL_SOCKET && type == LibC.SCM_RIGHTS) {
                    for (long o = LibC.CMSG_HEADER_BYTES; o + 4 <= length; o += 4) {
                        fds.add(control.get(ValueLayout.JAVA_INT, at + o));
                    }
                } else if (level == LibC.SOL_SOCKET && type == LibC.SCM_CREDENTIALS && length >= LibC.CMSG_HEADER_BYTES
                        + LibC.UCRED_BYTES) {
                    pid = Integer.toUnsignedLong(control.get(ValueLayout.JAVA_INT, at + LibC.CMSG_HEADER_BYTES));
                    senderUid = Integer.toUnsignedLong(control.get(ValueLayout.JAVA_INT, at + LibC.CMSG_HEADER_BYTES + 4));
                }
                at += (length + 7) & ~7L;
            }
            boolean ours = r.value() == PAYLOAD_BYTES && payload.get(ValueLayout.JAVA_INT, 12) == MAGIC && fds.size() == 1
                    && senderUid == Integer.toUnsignedLong(uid);
            if (!ours) {
                LOG.warn("fd channel {}: dropped a message of {} bytes with {} descriptor(s) from pid={} uid={} (expected"
                        + " {} bytes, one descriptor, uid={})", path, r.value(), fds.size(), pid, senderUid, PAYLOAD_BYTES, uid);
                fds.forEach(LibC::close);
                return;
            }
            long tag = payload.get(ValueLayout.JAVA_LONG, 0);
            int rank = payload.get(ValueLayout.JAVA_INT, 8);
            Arrived earlier = pending.computeIfAbsent(tag, k -> new LinkedHashMap<>()).put(rank, new Arrived(fds.getFirst(), pid));
            if (earlier != null) {
                LOG.warn("fd channel {}: tag={} rank={} sent twice; the earlier descriptor is dropped", path, tag, rank);
                LibC.close(earlier.fd());
            }
        }
    }

    /** Closes the socket, removes its path, and closes descriptors nobody took. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (Map<Integer, Arrived> m : pending.values()) {
            m.values().forEach(x -> LibC.close(x.fd()));
        }
        pending.clear();
        LibC.close(socket);
        try {
            Files.deleteIfExists(path);
        } catch (java.io.IOException e) {
            LOG.warn("fd channel: cannot remove {}: {}", path, e.toString());
        }
    }

    /**
     * Closes a descriptor this process owns (one {@link #receiveFromEach} returned).
     *
     * @param fd the descriptor; not to be used again after this call
     */
    public static void closeDescriptor(int fd) {
        LibC.close(fd);
    }

    private static MemorySegment sockaddr(Arena a, byte[] name) {
        MemorySegment address = a.allocate(2 + LibC.SUN_PATH_BYTES, 8);
        address.set(ValueLayout.JAVA_SHORT, 0, (short) LibC.AF_UNIX);
        MemorySegment.copy(name, 0, address, ValueLayout.JAVA_BYTE, 2, name.length);
        return address.asSlice(0, 2 + name.length + 1); // the family, the path and its NUL
    }

    private static void check(LibC.Result r, String what) {
        if (r.failed()) {
            throw new SymmemException(what + " failed: errno=" + r.errno() + " (" + LibC.strerror(r.errno()) + "; fix:"
                    + " check the socket directory's permissions and free space, and the open-file limit, ulimit -n)");
        }
    }
}
