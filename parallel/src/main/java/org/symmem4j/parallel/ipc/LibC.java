package org.symmem4j.parallel.ipc;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import org.symmem4j.parallel.Invariants;
import org.symmem4j.parallel.SymmemException;

/**
 * The few C library calls symmem4j makes itself, through Java FFM, for passing file descriptors
 * between processes ({@link FdChannel}): Unix-domain datagram sockets ({@code socket}, {@code bind},
 * {@code setsockopt}, {@code sendmsg}, {@code recvmsg}), {@code close}, {@code getuid}. Linux on 64-bit CPUs (x86-64, aarch64), whose structure layouts these are. Every
 * call that can fail reports {@code errno}, which the caller turns into an error that names the call.
 */
final class LibC {

    static final int AF_UNIX = 1;
    static final int SOCK_DGRAM = 2;
    static final int SOCK_CLOEXEC = 0x80000;
    static final int SOL_SOCKET = 1;
    static final int SO_PASSCRED = 16;
    static final int SO_RCVTIMEO = 20;
    static final int SCM_RIGHTS = 1;
    static final int SCM_CREDENTIALS = 2;
    static final int MSG_CMSG_CLOEXEC = 0x40000000;
    static final int EAGAIN = 11;
    static final int EINTR = 4;
    /** {@code sun_path}'s size in {@code struct sockaddr_un}: a path must leave room for its NUL. */
    static final int SUN_PATH_BYTES = 108;

    /**
     * {@code struct msghdr} on LP64 Linux:
     * <pre>
     *   0  void*     msg_name        8  socklen_t msg_namelen (+4 pad)
     *  16  iovec*    msg_iov        24  size_t    msg_iovlen
     *  32  void*     msg_control    40  size_t    msg_controllen
     *  48  int       msg_flags (+4 pad)                              = 56 bytes
     * </pre>
     */
    static final long MSGHDR_BYTES = 56;
    static final long MSG_NAME = 0;
    static final long MSG_NAMELEN = 8;
    static final long MSG_IOV = 16;
    static final long MSG_IOVLEN = 24;
    static final long MSG_CONTROL = 32;
    static final long MSG_CONTROLLEN = 40;
    /** {@code struct iovec}: {@code void* iov_base; size_t iov_len} = 16 bytes. */
    static final long IOVEC_BYTES = 16;
    /**
     * {@code struct cmsghdr}: {@code size_t cmsg_len; int cmsg_level; int cmsg_type;} then the data,
     * each message aligned to 8: {@code CMSG_LEN(n) = 16 + n}, {@code CMSG_SPACE(n) = 16 + align8(n)}.
     */
    static final long CMSG_HEADER_BYTES = 16;
    /** {@code struct ucred}: {@code pid_t pid; uid_t uid; gid_t gid;} = 12 bytes. */
    static final long UCRED_BYTES = 12;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final StructLayout CALL_STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CALL_STATE.varHandle(java.lang.foreign.MemoryLayout.PathElement.groupElement("errno"));
    private static final Linker.Option CAPTURE_ERRNO = Linker.Option.captureCallState("errno");

    private static final MethodHandle SOCKET = function("socket", FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT));
    private static final MethodHandle BIND = function("bind", FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS, JAVA_INT));
    private static final MethodHandle SETSOCKOPT = function("setsockopt",
            FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT, ADDRESS, JAVA_INT));
    private static final MethodHandle SENDMSG = function("sendmsg", FunctionDescriptor.of(JAVA_LONG, JAVA_INT, ADDRESS, JAVA_INT));
    private static final MethodHandle RECVMSG = function("recvmsg", FunctionDescriptor.of(JAVA_LONG, JAVA_INT, ADDRESS, JAVA_INT));
    private static final MethodHandle CLOSE = function("close", FunctionDescriptor.of(JAVA_INT, JAVA_INT));
    private static final MethodHandle GETUID = LINKER.downcallHandle(LINKER.defaultLookup().find("getuid").orElseThrow(),
            FunctionDescriptor.of(JAVA_INT));
    private static final MethodHandle STRERROR = LINKER.downcallHandle(LINKER.defaultLookup().find("strerror").orElseThrow(),
            FunctionDescriptor.of(ADDRESS, JAVA_INT));

    private LibC() {
    }

    private static MethodHandle function(String name, FunctionDescriptor d) {
        MemorySegment symbol = LINKER.defaultLookup().find(name).orElseThrow(
                () -> new SymmemException("libc has no " + name + " (symmem4j passes file descriptors on Linux only;"
                        + " fix: run on Linux, or use a transport that needs no descriptor passing, host-shm or"
                        + " host-in-jvm)"));
        return LINKER.downcallHandle(symbol, d, CAPTURE_ERRNO);
    }

    /** A call's result and its errno. */
    record Result(long value, int errno) {
        boolean failed() {
            return value < 0;
        }
    }

    static Result socket(int domain, int type, int protocol) {
        return call(s -> (int) SOCKET.invokeExact(s, domain, type, protocol));
    }

    static Result bind(int fd, MemorySegment address, int length) {
        return call(s -> (int) BIND.invokeExact(s, fd, address, length));
    }

    static Result setsockopt(int fd, int level, int name, MemorySegment value, int length) {
        return call(s -> (int) SETSOCKOPT.invokeExact(s, fd, level, name, value, length));
    }

    static Result sendmsg(int fd, MemorySegment message, int flags) {
        return call(s -> (long) SENDMSG.invokeExact(s, fd, message, flags));
    }

    static Result recvmsg(int fd, MemorySegment message, int flags) {
        return call(s -> (long) RECVMSG.invokeExact(s, fd, message, flags));
    }

    static Result close(int fd) {
        return call(s -> (int) CLOSE.invokeExact(s, fd));
    }

    static int getuid() {
        try {
            return (int) GETUID.invokeExact();
        } catch (Throwable t) {
            throw Invariants.violated("getuid failed: " + t, t);
        }
    }

    /** {@code strerror(errno)}: the C library's text for an error number. */
    static String strerror(int errno) {
        try {
            MemorySegment text = (MemorySegment) STRERROR.invokeExact(errno);
            return text.reinterpret(256).getString(0);
        } catch (Throwable t) {
            return "errno " + errno;
        }
    }

    @FunctionalInterface
    private interface Call {
        long invoke(MemorySegment callState) throws Throwable;
    }

    private static Result call(Call c) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment state = a.allocate(CALL_STATE);
            long v = c.invoke(state);
            return new Result(v, v < 0 ? (int) ERRNO.get(state, 0L) : 0);
        } catch (Throwable t) {
            throw Invariants.violated("libc call failed: " + t, t);
        }
    }
}
