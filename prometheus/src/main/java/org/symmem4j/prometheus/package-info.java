/**
 * Serving symmem4j's meters (and the rest of a Micrometer Prometheus registry) to Prometheus:
 * {@link org.symmem4j.prometheus.PrometheusEndpoint}, loopback by default, every request on a virtual thread
 * of its own and bounded in time, head size and number, so that no client can stall a scrape. A module of its
 * own ({@code symmem4j-prometheus}) so that users of other Micrometer registries do not get the Prometheus client.
 */
package org.symmem4j.prometheus;
