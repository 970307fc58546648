package org.symmem4j.parallel;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * A group's ranks laid out as an n-dimensional grid with named dimensions, as PyTorch's
 * {@code DeviceMesh}: one sub-group per dimension for each rank, made of the ranks that share every
 * other coordinate. For data × pipeline × tensor parallelism, {@code DeviceMesh.of(world, "dp", 2,
 * "pp", 4)}: the stage's gradients are averaged over {@code mesh.group("dp")}, activations flow
 * along {@code mesh.group("pp")}.
 *
 * <p>Layout: row-major, the last dimension fastest, so a rank's coordinates are its digits in the
 * mixed radix of the shape ({@code rank = sum(coordinate[d] * stride[d])}, {@code stride} of the
 * last dimension 1). For dp=2, pp=4:
 * <pre>
 *            pp=0  pp=1  pp=2  pp=3
 *    dp=0  [   0     1     2     3  ]   &lt;- group("pp") of ranks 0..3
 *    dp=1  [   4     5     6     7  ]
 *              ^
 *              group("dp") of ranks 0 and 4
 * </pre>
 * A rank's rank in {@code group(d)} is its coordinate along {@code d}. Neighbouring ranks (the last
 * dimension) are the ones that talk most in the usual placement (tensor parallel last), which on a
 * machine puts them on neighbouring threads, processes or GPUs.
 *
 * <p>Creating a mesh is collective over the group: one exchange checks that every rank passed the
 * same shape (before anything is created, so a disagreeing rank makes every rank fail with the same
 * message naming each rank's shape), then one {@link Group#split(int, int)} per dimension, in order.
 * The sub-groups keep the group's {@link Group#localRank()}, options and abort (see
 * {@link Group#split(int, int)}). Closing the mesh closes its sub-groups, not the group it was made
 * from; close the sub-groups' memories and communicators first.
 */
public final class DeviceMesh implements AutoCloseable {

    /** What a dimension (and a {@link Group#split(int, int, String) split}) may be called: it appears in errors and store keys. */
    public static final Pattern LABEL = Pattern.compile("[A-Za-z][A-Za-z0-9_-]{0,31}");

    private final Group group;
    private final Map<String, Integer> sizes;
    private final Map<String, Integer> coordinates;
    private final Map<String, Group> groups;
    private boolean closed;

    private DeviceMesh(Group group, Map<String, Integer> sizes, Map<String, Integer> coordinates,
                       Map<String, Group> groups) {
        this.group = group;
        this.sizes = sizes;
        this.coordinates = coordinates;
        this.groups = groups;
    }

    /**
     * Collective over {@code group}: lays its ranks out as a grid of the given shape and creates one
     * sub-group per dimension.
     *
     * @param group          the ranks to lay out; its size must be the product of the sizes
     * @param namesAndSizes  dimension names and sizes, alternating, outermost first: {@code "dp", 2,
     *                       "pp", 4}; names match {@code [A-Za-z][A-Za-z0-9_-]{0,31}} and differ, sizes
     *                       are at least 1
     * @return this rank's mesh
     * @throws IllegalArgumentException when the shape is malformed (on the rank that passed it), or when
     *         the ranks' shapes differ or the product of the sizes is not the group's size (on every rank)
     * @throws PeerTimeoutException when a rank does not arrive within the timeout, or is gone
     */
    public static DeviceMesh of(Group group, Object... namesAndSizes) {
        Map<String, Integer> shape = parseShape(namesAndSizes);
        String mine = describeShape(shape);
        // Agreement first: nothing is split until every rank is known to want the same mesh.
        List<byte[]> all = group.allGatherBytes("device-mesh-shape", mine.getBytes(StandardCharsets.UTF_8));
        List<String> shapes = all.stream().map(b -> new String(b, StandardCharsets.UTF_8)).toList();
        if (shapes.stream().anyMatch(s -> !s.equals(mine))) {
            StringBuilder each = new StringBuilder();
            for (int r = 0; r < shapes.size(); r++) {
                each.append(r == 0 ? "" : ", ").append(group.describe(r)).append(": ")
                        .append(shapes.get(r).replaceAll("[^\\x20-\\x7e]", "?"));
            }
            throw new IllegalArgumentException("device mesh shape mismatch: rank=" + group.rank() + " shape=" + mine
                    + "; ranks passed " + each + " (fix: every rank must pass the same names and sizes, in the same"
                    + " order)");
        }
        long product = 1;
        for (int size : shape.values()) {
            product *= size;
        }
        if (product != group.worldSize()) {
            throw new IllegalArgumentException("device mesh shape " + mine + " has " + product + " ranks but the group"
                    + " has worldSize=" + group.worldSize() + " (the product of the sizes must equal the group's size;"
                    + " fix: choose sizes whose product is " + group.worldSize() + ")");
        }
        List<String> names = new ArrayList<>(shape.keySet());
        int[] dims = shape.values().stream().mapToInt(Integer::intValue).toArray();
        int[] coordinate = coordinatesOf(group.rank(), dims);
        Map<String, Integer> coordinates = new LinkedHashMap<>();
        for (int d = 0; d < dims.length; d++) {
            coordinates.put(names.get(d), coordinate[d]);
        }
        Map<String, Group> groups = new LinkedHashMap<>();
        try {
            for (int d = 0; d < dims.length; d++) {
                // color: the rank's position with dimension d left out; key: its coordinate along d
                int color = 0;
                for (int e = 0; e < dims.length; e++) {
                    if (e != d) {
                        color = color * dims[e] + coordinate[e];
                    }
                }
                groups.put(names.get(d), group.split(color, coordinate[d], names.get(d)));
            }
        } catch (RuntimeException e) {
            for (Group g : groups.values()) {
                g.close();
            }
            throw e;
        }
        return new DeviceMesh(group, shape, coordinates, groups);
    }

    private static Map<String, Integer> parseShape(Object[] namesAndSizes) {
        if (namesAndSizes == null || namesAndSizes.length == 0 || namesAndSizes.length % 2 != 0) {
            throw new IllegalArgumentException("device mesh shape: expected name, size pairs such as (\"dp\", 2, \"pp\", 4);"
                    + " found " + (namesAndSizes == null ? "null" : namesAndSizes.length + " arguments")
                    + " (fix: pass each dimension's name followed by its size)");
        }
        Map<String, Integer> shape = new LinkedHashMap<>();
        for (int i = 0; i < namesAndSizes.length; i += 2) {
            if (!(namesAndSizes[i] instanceof String name) || !LABEL.matcher(name).matches()) {
                throw new IllegalArgumentException("device mesh shape: argument " + i + " must be a dimension name matching "
                        + LABEL.pattern() + "; found " + namesAndSizes[i] + " (fix: use a letter then up to 31"
                        + " letters, digits, _ or -, e.g. \"dp\")");
            }
            if (!(namesAndSizes[i + 1] instanceof Integer size) || size < 1) {
                throw new IllegalArgumentException("device mesh shape: the size of dimension '" + name + "' must be an int"
                        + " >= 1; found " + namesAndSizes[i + 1] + " (fix: pass a positive int after the name,"
                        + " e.g. \"dp\", 2)");
            }
            if (shape.put(name, size) != null) {
                throw new IllegalArgumentException("device mesh shape: dimension '" + name + "' named twice; expected each"
                        + " name once (fix: give every dimension its own name, e.g. \"dp\", 2, \"tp\", 4)");
            }
        }
        return shape;
    }

    private static String describeShape(Map<String, Integer> shape) {
        List<String> parts = new ArrayList<>();
        shape.forEach((n, s) -> parts.add(n + "=" + s));
        return String.join(",", parts);
    }

    /** Row-major digits of {@code rank} in the mixed radix {@code dims}, last dimension fastest. */
    static int[] coordinatesOf(int rank, int[] dims) {
        int[] c = new int[dims.length];
        int rest = rank;
        for (int d = dims.length - 1; d >= 0; d--) {
            c[d] = rest % dims[d];
            rest /= dims[d];
        }
        return c;
    }

    /**
     * The group the mesh was made from.
     *
     * @return the parent group (not closed by {@link #close()})
     */
    public Group group() {
        return group;
    }

    /**
     * This rank's sub-group along dimension {@code name}: the ranks that share every other coordinate,
     * numbered by their coordinate along {@code name}.
     *
     * @param name a dimension of the mesh
     * @return the sub-group
     * @throws IllegalArgumentException when the mesh has no such dimension
     */
    public Group group(String name) {
        checkOpen();
        return groups.get(known(name));
    }

    /**
     * This rank's coordinate along dimension {@code name} (its rank in {@link #group(String)}).
     *
     * @param name a dimension of the mesh
     * @return 0..size(name)-1
     * @throws IllegalArgumentException when the mesh has no such dimension
     */
    public int coordinate(String name) {
        return coordinates.get(known(name));
    }

    /**
     * The size of dimension {@code name}.
     *
     * @param name a dimension of the mesh
     * @return at least 1
     * @throws IllegalArgumentException when the mesh has no such dimension
     */
    public int size(String name) {
        return sizes.get(known(name));
    }

    /**
     * The dimension names, outermost first.
     *
     * @return the names, in the order given at creation
     */
    public List<String> dimensionNames() {
        return List.copyOf(sizes.keySet());
    }

    /**
     * The rank in {@link #group()} at the given coordinates, one per dimension, outermost first.
     *
     * @param coordinates one coordinate per dimension
     * @return the rank at those coordinates
     * @throws IllegalArgumentException when the count or a coordinate is out of range
     */
    public int rankAt(int... coordinates) {
        List<String> names = dimensionNames();
        if (coordinates.length != names.size()) {
            throw new IllegalArgumentException("rankAt: expected " + names.size() + " coordinates " + names + "; found "
                    + coordinates.length + " (fix: pass one coordinate per dimension, in that order)");
        }
        int rank = 0;
        for (int d = 0; d < coordinates.length; d++) {
            int size = sizes.get(names.get(d));
            if (coordinates[d] < 0 || coordinates[d] >= size) {
                throw new IllegalArgumentException("rankAt: coordinate " + names.get(d) + "=" + coordinates[d]
                        + " outside [0, " + size + ") (expected a coordinate below the dimension's size; fix: pass 0 .. "
                        + (size - 1) + " for " + names.get(d) + ")");
            }
            rank = rank * size + coordinates[d];
        }
        return rank;
    }

    /**
     * What {@link #shrink(String)} left: the survivors' mesh (null on a rank that leaves), the ranks of the old
     * {@link #group()} that died, and the coordinates along the shrunk dimension of the slices lost with them.
     *
     * @param mesh           the survivors' mesh over their new group, the same dimensions with the shrunk one smaller;
     *                       null on a rank that is alive but whose slice was lost (it leaves)
     * @param dead           the dead ranks of the old group (its numbering), ascending
     * @param lostCoordinates the shrunk dimension's coordinates that are gone, ascending
     */
    public record Shrunk(DeviceMesh mesh, List<Integer> dead, List<Integer> lostCoordinates) {

        /** {@return whether this rank leaves: alive, but its slice went with a dead rank} */
        public boolean left() {
            return mesh == null;
        }
    }

    /**
     * In-place shrink of the mesh along {@code name} (the data-parallel dimension of a {@code dp x tp} mesh): collective
     * over the survivors, after a collective failed because ranks died. A dead rank takes out its whole slice along
     * the other dimensions (every rank with its coordinate along {@code name}: the tensor-parallel peers of its
     * replica, which cannot go on without it); those slices' live ranks get a {@link Shrunk} without a mesh and leave.
     * The others shrink the mesh's group ({@link Group#shrink(java.util.function.IntFunction)}: a new group, the old
     * one aborted) and lay it out as the same dimensions with {@code name} smaller by the slices lost; the survivors
     * keep their order, so each keeps its coordinates along the other dimensions (row-major order restricted to the
     * survivors is the smaller mesh's row-major order). The caller owns the new mesh and its {@link #group()}: close
     * the mesh, then the group; this mesh stays the caller's to close (its groups are aborted: their close waits for
     * nobody).
     *
     * @param name the dimension whose slices are lost whole
     * @return the survivors' mesh, or none on a rank that leaves
     * @throws IllegalArgumentException when the mesh has no such dimension
     * @throws UnsupportedOperationException when the mesh's group cannot shrink ({@link Group#canShrink()})
     * @throws SymmemException when no dead rank is named within the timeout, or the new group cannot form
     */
    public Shrunk shrink(String name) {
        checkOpen();
        List<String> names = dimensionNames();
        int along = names.indexOf(known(name));
        int[] dims = sizes.values().stream().mapToInt(Integer::intValue).toArray();
        Group.Survivors s = group.shrink(dead -> {
            int coordinate = coordinatesOf(dead, dims)[along];
            int[] slice = new int[group.worldSize() / dims[along]];
            int n = 0;
            for (int r = 0; r < group.worldSize(); r++) {
                if (coordinatesOf(r, dims)[along] == coordinate) {
                    slice[n++] = r;
                }
            }
            return slice;
        });
        java.util.SortedSet<Integer> lost = new java.util.TreeSet<>();
        for (int d : s.dead()) {
            lost.add(coordinatesOf(d, dims)[along]);
        }
        if (s.left()) {
            return new Shrunk(null, s.dead(), List.copyOf(lost));
        }
        Object[] shape = new Object[2 * names.size()];
        for (int d = 0; d < names.size(); d++) {
            shape[2 * d] = names.get(d);
            shape[2 * d + 1] = d == along ? dims[d] - lost.size() : dims[d];
        }
        try {
            return new Shrunk(of(s.group(), shape), s.dead(), List.copyOf(lost));
        } catch (RuntimeException e) {
            s.group().close();
            throw e;
        }
    }

    private String known(String name) {
        if (!sizes.containsKey(name)) {
            throw new IllegalArgumentException("device mesh has no dimension '" + name + "'; dimensions are "
                    + describeShape(sizes) + " (fix: use one of those names, as given to DeviceMesh.of)");
        }
        return name;
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("device mesh " + describeShape(sizes) + " already closed; expected an open mesh"
                    + " (fix: use the mesh and its groups before close(), or build a new one)");
        }
    }

    /** Closes the sub-groups (not the group the mesh was made from). Close their memories first. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (Group g : groups.values()) {
            g.close();
        }
    }

    @Override
    public String toString() {
        return "DeviceMesh[" + describeShape(sizes) + ", rank=" + group.rank() + ", coordinates=" + coordinates + "]";
    }
}
