/**
 * Shared weights: a model version's flat parameters once per host in a parameter cache, and DL4J networks put over
 * that memory without a copy. Knows nothing of routing or HTTP.
 */
package org.symmem4j.serving.weights;
