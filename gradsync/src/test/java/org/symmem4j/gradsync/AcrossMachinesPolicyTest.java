package org.symmem4j.gradsync;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.lang.reflect.Proxy;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.symmem4j.parallel.Algorithm;
import org.symmem4j.parallel.Communicator;
import org.symmem4j.parallel.DType;
import org.symmem4j.parallel.Group;
import org.symmem4j.parallel.ReduceOp;

/**
 * How the policy picks for a group across machines, whose communicator runs only {@link Algorithm#MPI} and
 * {@link Algorithm#HIERARCHICAL}: flat MPI below {@link AlgorithmPolicy#HIERARCHICAL_FROM_BYTES}, hierarchical from
 * there, whatever the calibrated table says for the transports of one machine; the trainers' rank-ordered reductions
 * take ONE_SHOT where it runs and the group's engine otherwise.
 */
class AcrossMachinesPolicyTest {

    /** A communicator of {@code ranks} ranks that runs exactly {@code algorithms} (FLOAT32 and FLOAT64). */
    static Communicator runs(int ranks, Set<Algorithm> algorithms) {
        Group group = (Group) Proxy.newProxyInstance(Group.class.getClassLoader(), new Class<?>[] {Group.class},
                (proxy, method, args) -> switch (method.getName()) {
                    case "worldSize" -> ranks;
                    case "rank" -> 0;
                    default -> throw new UnsupportedOperationException(method.getName());
                });
        return (Communicator) Proxy.newProxyInstance(Communicator.class.getClassLoader(), new Class<?>[] {Communicator.class},
                (proxy, method, args) -> switch (method.getName()) {
                    case "group" -> group;
                    case "transportName" -> algorithms.contains(Algorithm.HIERARCHICAL)
                            ? algorithms.contains(Algorithm.NCCL) ? "hierarchical(cuda-nvidia-h200 + nccl)" : "hierarchical(host-shm + mpi)"
                            : "host-shm";
                    case "supports" -> algorithms.contains((Algorithm) args[0])
                            && (args.length == 1 || args[1] == DType.FLOAT32 || args[1] == DType.FLOAT64);
                    case "unwrap" -> java.util.Optional.empty();
                    default -> throw new UnsupportedOperationException(method.getName());
                });
    }

    @Test
    void acrossMachinesSmallMessagesGoFlatAndLargeOnesHierarchical() {
        Communicator comm = runs(4, Set.of(Algorithm.MPI, Algorithm.HIERARCHICAL));
        AlgorithmPolicy policy = AlgorithmPolicy.calibrated();
        long edge = AlgorithmPolicy.HIERARCHICAL_FROM_BYTES / 4;
        assertEquals(Algorithm.MPI, policy.choose(comm, 256, DType.FLOAT32, ReduceOp.SUM));
        assertEquals(Algorithm.MPI, policy.choose(comm, edge - 1, DType.FLOAT32, ReduceOp.SUM));
        assertEquals(Algorithm.HIERARCHICAL, policy.choose(comm, edge, DType.FLOAT32, ReduceOp.SUM));
        assertEquals(Algorithm.HIERARCHICAL, policy.choose(comm, 64L << 20, DType.FLOAT32, ReduceOp.AVG));
        // only one of the two: that one, whatever the size
        assertEquals(Algorithm.MPI, policy.choose(runs(4, Set.of(Algorithm.MPI)), 64L << 20, DType.FLOAT32, ReduceOp.SUM));
    }

    @Test
    void gpusAcrossMachinesGoFlatNcclBelowTheGpuCrossingAndHierarchicalFromIt() {
        Communicator comm = runs(4, Set.of(Algorithm.NCCL, Algorithm.HIERARCHICAL));
        AlgorithmPolicy policy = AlgorithmPolicy.calibrated();
        long edge = AlgorithmPolicy.HIERARCHICAL_FROM_BYTES_GPU / 4;
        assertEquals(Algorithm.NCCL, policy.choose(comm, 256, DType.FLOAT32, ReduceOp.SUM));
        assertEquals(Algorithm.NCCL, policy.choose(comm, edge - 1, DType.FLOAT32, ReduceOp.SUM));
        assertEquals(Algorithm.HIERARCHICAL, policy.choose(comm, edge, DType.FLOAT32, ReduceOp.SUM));
        assertEquals(Algorithm.HIERARCHICAL, policy.choose(comm, 64L << 20, DType.FLOAT32, ReduceOp.AVG));
        // the rank-ordered reductions: NCCL's flat all-reduce gives every rank the same bits
        assertEquals(Algorithm.NCCL, AlgorithmPolicy.oneShotWhereItRuns(comm, 1, DType.FLOAT64, ReduceOp.SUM));
    }

    @Test
    void rankOrderedReductionsTakeOneShotWhereItRunsElseTheEngine() {
        assertEquals(Algorithm.ONE_SHOT, AlgorithmPolicy.oneShotWhereItRuns(
                runs(4, Set.of(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.RING)), 1, DType.FLOAT64, ReduceOp.SUM));
        assertEquals(Algorithm.MPI, AlgorithmPolicy.oneShotWhereItRuns(
                runs(4, Set.of(Algorithm.MPI, Algorithm.HIERARCHICAL)), 1, DType.FLOAT64, ReduceOp.MIN));
        IllegalArgumentException none = assertThrows(IllegalArgumentException.class, () -> AlgorithmPolicy.oneShotWhereItRuns(
                runs(4, Set.of(Algorithm.RING)), 1, DType.FLOAT64, ReduceOp.SUM));
        assertEquals(true, none.getMessage().contains("host-shm"), none.getMessage());
    }
}
