/**
 * Serving DL4J models on symmetric memory (seed 001's inference patterns): a model's parameters live once per
 * host in symmetric memory and every worker runs the network over them without a copy; a router batches
 * requests for named, versioned models and hands them to workers; a new version is published while requests
 * flow (hot swap), and per-session decoding state lives in a shared cache so any worker continues any session.
 * Built on {@code org.symmem4j.state} and DL4J; the HTTP front is Javalin.
 */
package org.symmem4j.serving;
