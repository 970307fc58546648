/**
 * The CUDA transport: GPU symmetric memory of one machine, ranks as threads or processes
 * ({@link org.symmem4j.parallel.cuda.CudaTransport}, memory shared between processes as exported allocations),
 * the NVSHMEM variant ({@link org.symmem4j.parallel.cuda.NvshmemTransport}), the collectives on it
 * ({@link org.symmem4j.parallel.cuda.CudaCommunicator}: our kernels, NCCL, graph capture; the multi-machine
 * {@code CudaHierarchicalCommunicator}), the tensor-parallel GEMMs on cuBLAS, a rank's device state and launch
 * budget. The FFM bindings of the CUDA driver, NCCL, NVSHMEM and cuBLAS live in {@code cuda.ffi}.
 *
 * <p>Layer: a transport, beside {@link org.symmem4j.parallel.host}: it may use the API package and the runtime's
 * lower packages (control, numeric, rendezvous, ipc, sync, its own {@code ffi}, and multinode for the machines' topology and
 * the hierarchical schedule), never {@code host} (the control plane's memory comes through the group's host
 * transport) and never the group kinds. Nothing else in the module imports it: users reach it through
 * {@code CudaTransport.create()} and the API's interfaces.
 */
package org.symmem4j.parallel.cuda;
