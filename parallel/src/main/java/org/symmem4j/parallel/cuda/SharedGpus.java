package org.symmem4j.parallel.cuda;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.cuda.ffi.CudaDriver;

/**
 * Which ranks of a group share a GPU. Ranks share one when two of them name the same GPU by machine and PCI
 * address: ordinals differ between processes bound to their GPUs, and a sub-group's ranks may sit on any of the
 * machine's GPUs. A communicator whose ranks share a GPU needs a hardware queue per rank and NCCL's own handling.
 */
final class SharedGpus {

    private SharedGpus() {
    }

    /** {@return the machine's name and the PCI address of {@code device}: equal for two ranks exactly when they share the GPU} */
    static String deviceIdentity(CudaDriver driver, int device) {
        String host;
        try {
            host = java.net.InetAddress.getLocalHost().getHostName();
        } catch (java.net.UnknownHostException e) {
            host = System.getenv().getOrDefault("HOSTNAME", "localhost");
        }
        return host + "/" + String.format(Locale.ROOT, "%04x:%02x:%02x",
                driver.attribute(device, CudaDriver.ATTRIBUTE_PCI_DOMAIN_ID), driver.attribute(device, CudaDriver.ATTRIBUTE_PCI_BUS_ID),
                driver.attribute(device, CudaDriver.ATTRIBUTE_PCI_DEVICE_ID));
    }

    /**
     * Collective: every rank's GPU identity, gathered.
     *
     * @param group  the group
     * @param driver the CUDA driver
     * @param device this rank's device
     * @return the first pair of ranks that share a GPU, described ("ranks p and q share GPU ..."), or null when none do
     */
    static String firstSharing(Group group, CudaDriver driver, int device) {
        List<byte[]> gpus = group.allGatherBytes("cuda-device-identity",
                deviceIdentity(driver, device).getBytes(StandardCharsets.UTF_8));
        int worldSize = group.worldSize();
        for (int p = 0; p < worldSize; p++) {
            for (int q = p + 1; q < worldSize; q++) {
                if (Arrays.equals(gpus.get(p), gpus.get(q))) {
                    return "ranks " + p + " and " + q + " share GPU " + new String(gpus.get(p), StandardCharsets.UTF_8);
                }
            }
        }
        return null;
    }
}
