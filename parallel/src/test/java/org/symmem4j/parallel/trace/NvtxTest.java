package org.symmem4j.parallel.trace;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The NVTX binding against stand-in NVTX libraries compiled here with gcc from {@code nvtx/fake_nvtx.c} (its
 * attribute struct taken from NVIDIA's {@code nvtx3/nvToolsExt.h} where the CUDA headers are installed), which log
 * every call: the calls chosen per library, the names, payloads and domain passed, push/pop pairing, and per-thread
 * payload blocks. Skipped (not passed) without a C compiler. Also the real {@code libnvtx3interop.so.1} where present.
 */
class NvtxTest {

    @TempDir
    static Path dir;
    private static String gcc;
    private static Path source;
    private static String header;

    @BeforeAll
    static void findCompiler() throws IOException {
        for (String cc : List.of("gcc", "cc")) {
            if (runs(cc, "--version")) {
                gcc = cc;
                break;
            }
        }
        source = dir.resolve("fake_nvtx.c");
        try (InputStream in = NvtxTest.class.getResourceAsStream("/nvtx/fake_nvtx.c")) {
            assertNotNull(in, "test resource nvtx/fake_nvtx.c");
            Files.copy(in, source);
        }
        String home = System.getenv("CUDA_HOME");
        for (String root : home == null ? List.of("/usr/local/cuda") : List.of(home, "/usr/local/cuda")) {
            if (Files.isRegularFile(Path.of(root, "include", "nvtx3", "nvToolsExt.h"))) {
                header = root + "/include";
                break;
            }
        }
    }

    private static boolean runs(String... command) {
        try {
            Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
            p.getInputStream().readAllBytes();
            return p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0;
        } catch (IOException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** The stand-in library built with {@code defines}, as a path. */
    private static String build(String name, String... defines) {
        Assumptions.assumeTrue(gcc != null, "no C compiler (gcc, cc) to build the stand-in NVTX library");
        Path out = dir.resolve(name + ".so");
        List<String> cmd = new ArrayList<>(List.of(gcc, "-shared", "-fPIC", "-O1", "-o", out.toString()));
        cmd.addAll(Arrays.asList(defines));
        if (header != null) {
            cmd.addAll(List.of("-DUSE_NVTX_HEADER", "-I" + header));
        }
        cmd.addAll(List.of(source.toString(), "-lpthread"));
        assertTrue(runs(cmd.toArray(String[]::new)), "gcc failed: " + String.join(" ", cmd));
        return out.toString();
    }

    /** The calls the library at {@code path} logged since its last reset, one per line. */
    private static List<String> log(String path) {
        try {
            SymbolLookup lib = SymbolLookup.libraryLookup(path, Arena.global());
            MethodHandle read = Linker.nativeLinker().downcallHandle(lib.find("fake_nvtx_log").orElseThrow(),
                    FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment buf = arena.allocate(1 << 20);
                int n = (int) read.invokeExact(buf, 1 << 20);
                String text = buf.getString(0, StandardCharsets.US_ASCII);
                assertEquals(n, text.length());
                return text.isEmpty() ? List.of() : List.of(text.split("\n"));
            }
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    private static void reset(String path) {
        try {
            MethodHandle reset = Linker.nativeLinker().downcallHandle(SymbolLookup.libraryLookup(path, Arena.global())
                    .find("fake_nvtx_reset").orElseThrow(), FunctionDescriptor.ofVoid());
            reset.invokeExact();
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    private static String color(String name) {
        return String.format("color=0x%08X", Nvtx.color(name));
    }

    @Test
    void domainCallsCarryNamesPayloadsAndPairs() {
        String lib = build("domain", "-DWITH_DOMAIN");
        List<String> why = new ArrayList<>();
        Nvtx.Binding b = Nvtx.Binding.load(lib, why).orElseThrow(() -> new AssertionError(why));
        assertEquals(Nvtx.Binding.Mode.DOMAIN, b.mode());
        assertEquals(List.of("create symmem4j"), log(lib));
        reset(lib);
        Nvtx.Range ar = new Nvtx.Range("symmem4j all_reduce", true);
        Nvtx.Range gemm = new Nvtx.Range("symmem4j all_gather_matmul", true);
        assertEquals(0, b.push(ar, 1024));
        assertEquals(1, b.push(gemm, -1));
        b.mark(ar);
        assertEquals(1, b.pop());
        assertEquals(1, b.push(ar, 0)); // a zero-byte payload is a payload
        assertEquals(1, b.pop());
        assertEquals(0, b.pop());
        assertEquals(List.of(
                "push symmem4j symmem4j all_reduce payload=1024 " + color("symmem4j all_reduce"),
                "push symmem4j symmem4j all_gather_matmul " + color("symmem4j all_gather_matmul"),
                "mark symmem4j symmem4j all_reduce " + color("symmem4j all_reduce"),
                "pop symmem4j",
                "push symmem4j symmem4j all_reduce payload=0 " + color("symmem4j all_reduce"),
                "pop symmem4j",
                "pop symmem4j"), log(lib));
        assertTrue(b.describe().contains("domain \"symmem4j\""), b.describe());
    }

    @Test
    void defaultDomainAndNamesOnlyLibraries() {
        String ex = build("ex");
        List<String> why = new ArrayList<>();
        Nvtx.Binding b = Nvtx.Binding.load(ex, why).orElseThrow(() -> new AssertionError(why));
        assertEquals(Nvtx.Binding.Mode.EX, b.mode());
        Nvtx.Range r = new Nvtx.Range("symmem4j reduce_scatter", true);
        b.push(r, 4096);
        b.pop();
        b.mark(r);
        assertEquals(List.of("pushEx symmem4j reduce_scatter payload=4096 " + color("symmem4j reduce_scatter"), "pop",
                "markEx symmem4j reduce_scatter " + color("symmem4j reduce_scatter")), log(ex));

        String ascii = build("ascii", "-DONLY_ASCII");
        Nvtx.Binding a = Nvtx.Binding.load(ascii, why).orElseThrow(() -> new AssertionError(why));
        assertEquals(Nvtx.Binding.Mode.ASCII, a.mode());
        a.push(r, 4096); // names only: the payload is dropped
        a.mark(r);
        a.pop();
        assertEquals(List.of("pushA symmem4j reduce_scatter", "markA symmem4j reduce_scatter", "pop"), log(ascii));
        assertTrue(a.describe().contains("names only"), a.describe());
    }

    @Test
    void payloadBlocksArePerThread() throws Exception {
        String lib = build("threads", "-DWITH_DOMAIN");
        List<String> why = new ArrayList<>();
        Nvtx.Binding b = Nvtx.Binding.load(lib, why).orElseThrow(() -> new AssertionError(why));
        reset(lib);
        Nvtx.Range r = new Nvtx.Range("symmem4j all_gather", true);
        int threads = 4;
        int each = 500;
        CountDownLatch start = new CountDownLatch(1);
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            long base = t * 1_000_000L;
            ts.add(Thread.ofPlatform().start(() -> {
                try {
                    start.await();
                } catch (InterruptedException e) {
                    throw new AssertionError(e);
                }
                for (int i = 0; i < each; i++) {
                    b.push(r, base + i);
                    b.pop();
                }
            }));
        }
        start.countDown();
        for (Thread t : ts) {
            t.join();
        }
        List<String> lines = log(lib);
        assertEquals(2 * threads * each, lines.size());
        List<Long> payloads = new ArrayList<>();
        for (String line : lines) {
            if (line.startsWith("push ")) {
                String p = line.substring(line.indexOf("payload=") + 8);
                payloads.add(Long.parseLong(p.substring(0, p.indexOf(' '))));
            } else {
                assertEquals("pop symmem4j", line);
            }
        }
        List<Long> expected = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            for (int i = 0; i < each; i++) {
                expected.add(t * 1_000_000L + i);
            }
        }
        payloads.sort(null);
        assertEquals(expected, payloads);
    }

    @Test
    void missingOrForeignLibrariesSayWhy() {
        List<String> why = new ArrayList<>();
        assertTrue(Nvtx.Binding.load(dir.resolve("absent.so").toString(), why).isEmpty());
        assertTrue(why.getFirst().startsWith(dir.resolve("absent.so") + " could not be loaded"), why.toString());
        String foreign = build("foreign", "-DNO_NVTX");
        why.clear();
        assertTrue(Nvtx.Binding.load(foreign, why).isEmpty());
        assertEquals(List.of(foreign + " has no nvtxRangePop (not an NVTX library?)"), why);
        why.clear();
        assertEquals(null, Nvtx.Binding.search(List.of(dir.resolve("absent.so").toString(), foreign), why));
        assertEquals(2, why.size(), why.toString());
    }

    @Test
    void searchOrder() {
        assertEquals(List.of("/opt/x/libnvtx.so"), Nvtx.candidates(" /opt/x/libnvtx.so ", "/cuda"));
        assertEquals(List.of("libnvtx3interop.so.1", "libnvToolsExt.so.1",
                "/cuda/lib64/libnvtx3interop.so.1", "/cuda/lib64/libnvToolsExt.so.1",
                "/cuda/lib/libnvtx3interop.so.1", "/cuda/lib/libnvToolsExt.so.1",
                "/usr/local/cuda/lib64/libnvtx3interop.so.1", "/usr/local/cuda/lib64/libnvToolsExt.so.1",
                "/usr/local/cuda/lib/libnvtx3interop.so.1", "/usr/local/cuda/lib/libnvToolsExt.so.1"),
                Nvtx.candidates(null, "/cuda"));
        assertEquals(List.of("libnvtx3interop.so.1", "libnvToolsExt.so.1",
                "/usr/local/cuda/lib64/libnvtx3interop.so.1", "/usr/local/cuda/lib64/libnvToolsExt.so.1",
                "/usr/local/cuda/lib/libnvtx3interop.so.1", "/usr/local/cuda/lib/libnvToolsExt.so.1"),
                Nvtx.candidates("", null));
    }

    @Test
    void rangeNamesArePrintableAscii() {
        Nvtx.Range r = new Nvtx.Range("symmem4j all_reduce", true);
        assertEquals("symmem4j all_reduce", r.message.getString(0, StandardCharsets.US_ASCII));
        assertEquals("symmem4j all_reduce".length() + 1, r.message.byteSize()); // NUL-terminated
        assertEquals(r.message, r.attributes.get(ADDRESS, Nvtx.ATTR_MESSAGE));
        Nvtx.Range unencoded = new Nvtx.Range("x", false);
        assertEquals(null, unencoded.message);
        assertEquals(null, unencoded.attributes);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Nvtx.range("all\u00e9"));
        assertTrue(e.getMessage().contains("character 233 at 3") && e.getMessage().contains("fix:"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Nvtx.range(""));
        assertThrows(IllegalArgumentException.class, () -> Nvtx.range("a\nb"));
        assertThrows(IllegalArgumentException.class, () -> Nvtx.range("x".repeat(256)));
    }

    @Test
    void theFacadeSaysWhatItLoaded() {
        // this JVM's own search: on, with the library it names, or off, naming every place tried; calls never throw
        String status = Nvtx.describe();
        assertEquals(Nvtx.enabled(), status.startsWith("NVTX ranges on: "), status);
        if (!Nvtx.enabled()) {
            assertTrue(status.contains("libnvtx3interop.so.1 could not be loaded"), status);
        }
        Nvtx.Range r = Nvtx.range("symmem4j test");
        Nvtx.push(r, 8);
        Nvtx.mark(r);
        Nvtx.pop();
    }

    @Test
    void theRealInteropLibraryBinds() {
        String home = System.getenv("CUDA_HOME");
        Path real = null;
        for (String root : home == null ? List.of("/usr/local/cuda") : List.of(home, "/usr/local/cuda")) {
            for (String sub : List.of("lib64", "lib")) {
                Path p = Path.of(root, sub, "libnvtx3interop.so.1");
                if (real == null && Files.isRegularFile(p)) {
                    real = p;
                }
            }
        }
        Assumptions.assumeTrue(real != null, "no libnvtx3interop.so.1 (CUDA 13) here");
        List<String> why = new ArrayList<>();
        Nvtx.Binding b = Nvtx.Binding.load(real.toString(), why).orElseThrow(() -> new AssertionError(why));
        assertEquals(Nvtx.Binding.Mode.DOMAIN, b.mode(), "CUDA 13's interop library exports the domain calls");
        Nvtx.Range r = new Nvtx.Range("symmem4j test", true);
        b.push(r, 64); // no tool attached: NVTX returns at once
        b.mark(r);
        b.pop();
        assertFalse(b.describe().isEmpty());
    }
}
