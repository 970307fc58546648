/**
 * The native bindings of the CUDA runtime, through the JDK's Foreign Function &amp; Memory API: the CUDA
 * driver ({@link org.symmem4j.parallel.cuda.ffi.CudaDriver}) and its virtual-memory calls
 * ({@link org.symmem4j.parallel.cuda.ffi.CudaVirtualMemory}), NCCL ({@link org.symmem4j.parallel.cuda.ffi.Nccl}),
 * NVSHMEM's host library ({@link org.symmem4j.parallel.cuda.ffi.Nvshmem}), cuBLAS
 * ({@link org.symmem4j.parallel.cuda.ffi.Cublas}) and the loading of each library by soname. Each library is one
 * class with one status checker that turns a failed call into a
 * {@link org.symmem4j.parallel.cuda.ffi.CudaException} naming the function, the code and the library's own error
 * string; a library that does not load gives {@code available()} false and a reason, and its calls a
 * {@link org.symmem4j.parallel.cuda.ffi.CudaUnavailableException}.
 *
 * <p>These are flat tables of native calls and their layouts, with no policy: everything that decides
 * (transports, communicators, kernels, graphs) lives in {@code org.symmem4j.parallel.cuda}, which is the only
 * user of this package. The classes are public for that package only and are not symmem4j's API, except the two
 * exceptions, which callers catch.
 */
package org.symmem4j.parallel.cuda.ffi;
