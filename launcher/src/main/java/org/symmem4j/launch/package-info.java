/**
 * {@code symmem4j-run}, the job launcher ({@link org.symmem4j.launch.Launcher}): starts one process per worker
 * or GPU with torchrun's variables and the job's id and secret, each bound to its own slice of the CPUs
 * ({@code LaunchPlan}, a pure function of the request, the machine and the environment), and stops them all
 * when one fails ({@code Supervisor}); with {@code --max-restarts} it then starts the job again, each time a
 * new generation with its own run id, port and secret.
 *
 * <p>Layer: an application on its own. It depends on the JDK and picocli only, not on the runtime: the
 * variables it sets are the contract with the processes' {@code ProcessGroup}s (the launcher's tests check both
 * sides agree).
 */
package org.symmem4j.launch;
