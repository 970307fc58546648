package org.symmem4j.parallel.cuda.ffi;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.ReduceOp;

/** What of the NVSHMEM binding runs without NVSHMEM: where the library is looked for, the layouts, the reductions it has. */
class NvshmemBindingTest {

    @Test
    void theLibraryIsLookedForWhereTheUserSaidFirstThenWhereInstallsPutIt(@TempDir Path dir) throws Exception {
        Path wheel = dir.resolve("venv/lib/python3.12/site-packages/nvidia/nvshmem/lib");
        Files.createDirectories(wheel);
        Files.writeString(wheel.resolve("libnvshmem_host.so.3"), "");
        Map<String, String> props = Map.of("symmem4j.nvshmem.library", dir.toString(), "user.home", "/nonexistent");
        Map<String, String> env = Map.of("SYMMEM4J_NVSHMEM_LIBRARY", "/given/libnvshmem_host.so.3",
                "NVSHMEM_HOME", "/opt/nvshmem-home", "VIRTUAL_ENV", dir.resolve("venv").toString());
        List<String> found = Nvshmem.candidates(props::get, env::get, Nvshmem::glob);
        // a directory given as the property means the library inside it
        assertEquals(dir.resolve("libnvshmem_host.so.3").toString(), found.get(0));
        assertEquals("/given/libnvshmem_host.so.3", found.get(1));
        assertEquals("/opt/nvshmem-home/lib/libnvshmem_host.so.3", found.get(2));
        assertEquals("libnvshmem_host.so.3", found.get(3));
        assertTrue(found.contains(wheel.resolve("libnvshmem_host.so.3").toString()), found::toString);
        assertTrue(found.indexOf(wheel.resolve("libnvshmem_host.so.3").toString()) > 3, "installs come after what the user named");
        // nothing given: the dynamic linker's name first
        List<String> plain = Nvshmem.candidates(k -> null, k -> null, pattern -> List.of());
        assertEquals(List.of("libnvshmem_host.so.3"), plain);
    }

    @Test
    void globMatchesWildcardDirectoriesAndSkipsWhatIsMissing(@TempDir Path dir) throws Exception {
        Files.createDirectories(dir.resolve("a1/x"));
        Files.createDirectories(dir.resolve("a2/x"));
        Files.createDirectories(dir.resolve("b/x"));
        Files.writeString(dir.resolve("a2/x/lib.so"), "");
        Files.writeString(dir.resolve("a1/x/lib.so"), "");
        Files.writeString(dir.resolve("b/x/lib.so"), "");
        assertEquals(List.of(dir.resolve("a1/x/lib.so").toString(), dir.resolve("a2/x/lib.so").toString()),
                Nvshmem.glob(dir + "/a*/x/lib.so"));
        assertEquals(List.of(), Nvshmem.glob(dir + "/none*/x/lib.so"));
    }

    @Test
    void layoutsMatchTheSizesNvshmemAsserts() {
        Nvshmem.verifyLayouts();
        assertEquals(144, Nvshmem.INIT_ATTR.byteSize());
        assertEquals(128, Nvshmem.UNIQUE_ID.byteSize());
    }

    @Test
    void nvshmemReducesWhatItHasFunctionsFor() {
        for (DType t : DType.values()) {
            assertTrue(Nvshmem.reduces(t, ReduceOp.SUM) && Nvshmem.reduces(t, ReduceOp.MAX) && Nvshmem.reduces(t, ReduceOp.MIN));
            assertTrue(!Nvshmem.reduces(t, ReduceOp.AVG), "NVSHMEM has no average");
        }
    }
}
