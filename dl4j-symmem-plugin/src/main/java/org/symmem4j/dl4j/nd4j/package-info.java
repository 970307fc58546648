/**
 * The plugin's glue to ND4J, a leaf package that the wrapper, the pipeline stages and the tensor-parallel layers all
 * build on (it imports none of them):
 *
 * <ul>
 *   <li>{@link org.symmem4j.dl4j.nd4j.ArrayCollectives}: in-place sums and maxima and the all-gather of ND4J arrays
 *       over a communicator, in rank order; {@link org.symmem4j.dl4j.nd4j.ArrayCollectives#segmentOf} gives a
 *       contiguous array's off-heap memory as a {@code MemorySegment}.</li>
 *   <li>{@link org.symmem4j.dl4j.nd4j.Nd4jThreadLimit}: ND4J's op and BLAS threads, set for a run and restored.</li>
 *   <li>{@link org.symmem4j.dl4j.nd4j.Nd4jDeviceGradients}: an array in a GPU's memory on ND4J's CUDA backend as the
 *       gradient sync's device gradients.</li>
 * </ul>
 */
package org.symmem4j.dl4j.nd4j;
