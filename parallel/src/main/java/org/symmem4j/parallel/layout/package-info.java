/**
 * Layouts of the shared-state structures built on symmetric memory (module {@code symmem4j-state}: ring
 * buffer, hash map, parameter cache; module {@code symmem4j-serving}: the session cache): offsets, a picture of each layout with who writes and who reads every
 * field, typed acquire/release/CAS accessors, and a {@code verify} that refuses memory laid out by another
 * structure, another version or another size. Only {@code parallel} defines shared-memory layouts; the
 * structures above it use these classes and never compute an offset themselves.
 */
package org.symmem4j.parallel.layout;
