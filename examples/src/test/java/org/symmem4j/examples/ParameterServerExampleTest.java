package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.GroupOptions;
import org.symmem4j.parallel.group.InJvmWorld;

/**
 * {@link ParameterServerExample} as three rank threads (a server, two trainers): the server's model after the steps
 * matches the float64 reference and each trainer counted every step in the shared map (the server throws otherwise).
 */
class ParameterServerExampleTest {

    private static final Pattern RESULT = Pattern.compile("parameter server: 2 trainers x 12 steps x 96 parameters;"
            + " model matches the float64 reference \\(max error ([0-9.eE+-]+)\\), every trainer counted 12 steps");

    @Test
    void threeRankThreadsTrainTheServersModelLikeFloat64() {
        List<String> out = InJvmWorld.runOnEveryRank(3, GroupOptions.defaults(),
                group -> ParameterServerExample.run(group, 12, 96));
        Matcher m = RESULT.matcher(out.getFirst());
        assertTrue(m.find(), out.getFirst());
        double maxError = Double.parseDouble(m.group(1));
        assertTrue(maxError <= 1e-4, "max error " + maxError);
        assertEquals(List.of("trainer 1 done", "trainer 2 done"), out.subList(1, 3));
    }
}
