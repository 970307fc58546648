/**
 * A host inference path for DL4J networks: {@link org.symmem4j.serving.host.HostNetwork} runs the forward pass of a
 * {@code MultiLayerConfiguration} of common layers (2-D convolution, max/average pooling, dense, output, batch
 * normalization, dropout, activation, global pooling) in Java with {@code jdk.incubator.vector}, reading the network's flat FP32 parameters in place from a {@code MemorySegment} (the
 * same segment {@code SharedNetworks} puts a DL4J network over). Configurations with anything else are refused
 * before anything is built. The router runs it for a model deployed with {@code ModelSpec.ofHostPath}.
 */
package org.symmem4j.serving.host;
