package org.symmem4j.parallel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.numeric.Reducer;

/**
 * symmem4j logs through SLF4J, as DL4J does, so the application's backend and its per-logger
 * levels for {@code org.symmem4j} apply. Checked in child JVMs with slf4j-simple, whose levels are
 * system properties.
 */
class LoggingTest {

    /** The child: makes the reducer choice, which logs one INFO line. */
    public static void main(String[] args) {
        System.out.println("REDUCER " + Reducer.forThisJvm().name());
    }

    private static String runChild(String symmemLevel) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(ProcessHandle.current().info().command().orElse("java"),
                "-Dsymmem4j.reducer=scalar", "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
                "-Dorg.slf4j.simpleLogger.log.org.symmem4j=" + symmemLevel,
                "-cp", System.getProperty("java.class.path"), LoggingTest.class.getName()));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        assertTrue(p.waitFor(60, TimeUnit.SECONDS));
        assertEquals(0, p.exitValue(), out);
        return out;
    }

    @Test
    void theApplicationsSlf4jLevelsGovernSymmem4jsLoggers() throws Exception {
        String info = runChild("info");
        assertTrue(info.contains("INFO org.symmem4j.parallel.numeric.Reducer - host reductions: scalar (forced"), info);
        String warn = runChild("warn");
        assertTrue(warn.contains("REDUCER scalar"), warn);
        assertFalse(warn.contains("host reductions"), "INFO is below the configured WARN: " + warn);
    }
}
