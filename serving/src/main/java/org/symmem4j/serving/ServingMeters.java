package org.symmem4j.serving;

/**
 * Every meter the router registers, one per model (tag {@code model}), with its Prometheus name. The names follow
 * Prometheus' conventions once exported: a timer's base unit is seconds ({@code _seconds}), a counter gets
 * {@code _total}. docs/serving.md lists the same table.
 */
public enum ServingMeters {
    /** Requests answered or refused, tag {@code outcome}: ok, bad_input, unknown_model, overloaded, timeout, failed, closed. */
    REQUESTS("symmem.serving.requests", "symmem_serving_requests_total", "counter"),
    /** Time from a request's arrival at the router to its answer (a histogram with percentile buckets). */
    REQUEST_DURATION("symmem.serving.request.duration", "symmem_serving_request_duration_seconds", "timer"),
    /** Time a request waited in the model's queue before a worker started its batch. */
    QUEUE_DURATION("symmem.serving.queue.duration", "symmem_serving_queue_duration_seconds", "timer"),
    /** Rows per batch handed to a worker. */
    BATCH_SIZE("symmem.serving.batch.size", "symmem_serving_batch_size", "distribution summary"),
    /** Requests waiting in the model's bounded queue. */
    QUEUE_DEPTH("symmem.serving.queue.depth", "symmem_serving_queue_depth", "gauge"),
    /** The version new requests go to. */
    CURRENT_VERSION("symmem.serving.version", "symmem_serving_version", "gauge"),
    /** Versions published or rolled back to (hot swaps). */
    SWAPS("symmem.serving.swaps", "symmem_serving_swaps_total", "counter");

    private final String name;
    private final String prometheusName;
    private final String type;

    ServingMeters(String name, String prometheusName, String type) {
        this.name = name;
        this.prometheusName = prometheusName;
        this.type = type;
    }

    /** {@return the Micrometer name} */
    public String meterName() {
        return name;
    }

    /** {@return the name a Prometheus registry exports} */
    public String prometheusName() {
        return prometheusName;
    }

    /** {@return the Micrometer meter type} */
    public String type() {
        return type;
    }
}
