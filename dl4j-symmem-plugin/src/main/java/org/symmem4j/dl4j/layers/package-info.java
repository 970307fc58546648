/**
 * DL4J layer implementations whose backward splits into its input-gradient and weight-gradient halves, for the
 * pipeline's zero-bubble schedule: {@link org.symmem4j.dl4j.layers.Splittable} (what a split layer does and keeps) and
 * {@link org.symmem4j.dl4j.layers.SplitDenseLayer} (DL4J's dense layer, split). A leaf package over DL4J: the pipeline
 * ({@code SplitBackward}, which puts split layers in place of DL4J's) and the tensor-parallel dense layers (which are
 * split dense layers with their group's sums) build on it; it imports neither.
 */
package org.symmem4j.dl4j.layers;
