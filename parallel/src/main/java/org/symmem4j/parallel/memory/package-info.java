/**
 * Host virtual memory page by page: reserving address space that holds memory only once written, giving pages
 * back, counting resident pages ({@code mmap}, {@code madvise}, {@code mincore} through the C library). Used by
 * the host transports for sparse symmetric memory and, through {@link org.symmem4j.parallel.memory.ReservedMemory},
 * by the layers above the runtime (a stage-3 trainer's hollow model), which must not reach into a transport.
 */
package org.symmem4j.parallel.memory;
