package org.symmem4j.launch;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.ForkJoinTask;
import java.util.concurrent.TimeUnit;

/**
 * Runs the launcher as a library from threads of the common {@link ForkJoinPool}: {@code launches} launches of a
 * 2-process {@code sh} job at once, each from a task of the pool. Prints each launch's status and exits 0 when every
 * launch exited 0, else 1 (with what failed). {@link LauncherTest} runs it in a JVM whose common pool has 2 workers and
 * no spares, where a wait that needs another worker of the pool cannot be served.
 */
public final class CommonPoolLaunches {

    private CommonPoolLaunches() {
    }

    /**
     * @param args the number of launches
     * @throws Exception when a launch does not end within two minutes
     */
    public static void main(String[] args) throws Exception {
        int launches = Integer.parseInt(args[0]);
        Map<String, String> env = Launcher.newJobEnvironment(System.getenv());
        List<ForkJoinTask<Launcher.Result>> tasks = new ArrayList<>();
        for (int i = 0; i < launches; i++) {
            tasks.add(ForkJoinPool.commonPool().submit(() -> Launcher.runCapturing(List.of("-n", "2", "--cpu-bind", "none",
                    "--", "sh", "-c", "sleep 0.2; echo \"done $RANK\""), env)));
        }
        int failed = 0;
        for (int i = 0; i < launches; i++) {
            try {
                Launcher.Result r = tasks.get(i).get(2, TimeUnit.MINUTES);
                System.out.println("launch " + i + " status " + r.status() + (r.status() == 0 ? "" : ": " + r.err()));
                failed += r.status() == 0 ? 0 : 1;
            } catch (java.util.concurrent.ExecutionException e) {
                System.out.println("launch " + i + " failed: " + e.getCause());
                failed++;
            }
        }
        System.out.println("common pool parallelism " + ForkJoinPool.commonPool().getParallelism() + ", " + failed
                + " of " + launches + " launches failed");
        System.exit(failed == 0 ? 0 : 1);
    }
}
