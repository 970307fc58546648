/** The HTTP front (Javalin): predict endpoints with JSON and NumPy .npy bodies, health and readiness. */
package org.symmem4j.serving.http;
