import java.lang.reflect.Field;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.openjdk.jol.info.GraphLayout;
import org.openjdk.jol.vm.VM;
import org.symmem4j.parallel.*;
import org.symmem4j.parallel.control.*;
import org.symmem4j.parallel.group.InJvmWorld;

/** Where the two ranks' hot objects lie on the heap, as the paired benchmark builds them (peer on its own thread). */
public class LayoutProbe {
    static volatile boolean stop;
    static volatile boolean peersOn;
    static final AtomicLong requested = new AtomicLong();

    public static void main(String[] a) throws Exception {
        String algo = a.length > 0 ? a[0] : "ONE_SHOT";
        int gcs = a.length > 1 ? Integer.parseInt(a[1]) : 0;
        Algorithm alg = Algorithm.valueOf(algo);
        InJvmWorld world = InJvmWorld.create(2);
        Communicator[] comms = new Communicator[2];
        CountDownLatch ready = new CountDownLatch(1);
        Thread peer = Thread.ofPlatform().name("bench-rank-1").start(() -> {
            try (Group g = world.join(1); Communicator c = Communicator.create(g); SymmetricMemory m = SymmetricMemory.allocate(g, 1024)) {
                comms[1] = c;
                FlightRecording sw = c.unwrap(FlightRecording.class).orElseThrow();
                ready.countDown();
                long done = 0;
                while (true) {
                    long req = requested.getAcquire();
                    if (done < req) {
                        boolean on = peersOn;
                        if (on != sw.isRecording()) sw.setRecording(on);
                        c.allReduce(m, 0, 256, DType.FLOAT32, ReduceOp.SUM, alg);
                        done++;
                    } else if (stop) break; else Thread.onSpinWait();
                }
            } catch (Throwable t) { t.printStackTrace(); }
        });
        Group g0 = world.join(0);
        Communicator c0 = Communicator.create(g0);
        comms[0] = c0;
        FlightRecording sw0 = c0.unwrap(FlightRecording.class).orElseThrow();
        SymmetricMemory m0 = SymmetricMemory.allocate(g0, 1024);
        ready.await();
        for (int block = 0; block < 20; block++) {
            boolean on = block % 2 == 1;
            sw0.setRecording(on); peersOn = on;
            requested.setRelease(requested.get() + 100);
            for (int i = 0; i < 100; i++) c0.allReduce(m0, 0, 256, DType.FLOAT32, ReduceOp.SUM, alg);
            if (block < gcs) { System.gc(); }
        }
        // stop the peer at a quiescent point before walking the graphs
        Thread.sleep(200);
        report(comms);
        stop = true;
        m0.close(); c0.close(); peer.join(); g0.close(); world.close();
    }

    static Object get(Object o, String f) throws Exception {
        Class<?> c = o.getClass();
        while (c != null) {
            try { Field fl = c.getDeclaredField(f); fl.setAccessible(true); return fl.get(o); } catch (NoSuchFieldException e) { c = c.getSuperclass(); }
        }
        throw new NoSuchFieldException(f);
    }

    record Obj(int rank, String name, long addr, long size) {}

    static void report(Communicator[] comms) throws Exception {
        List<Obj> objs = new ArrayList<>();
        for (int r = 0; r < 2; r++) {
            Object hc = comms[r];
            Object cp = get(hc, "control");
            Object rec = get(cp, "made");
            Object sync = get(cp, "sync");
            Object waiter = get(sync, "waiter");
            Map<String, Object> named = new LinkedHashMap<>();
            named.put("HostCommunicator[W]", hc);
            named.put("HostCommunicator.call Descriptor[W]", get(hc, "call"));
            named.put("HostCommunicator.srcs[W]", get(hc, "srcs"));
            named.put("HostCommunicator.srcOffsets[W]", get(hc, "srcOffsets"));
            named.put("HostCommunicator.srcTypes[W]", get(hc, "srcTypes"));
            named.put("ControlPlane[W seq]", cp);
            named.put("FlightRecorder[W lastSeq,startedSeq; R mask,ring,what]", rec);
            named.put("FlightRecorder.ring[W]", get(rec, "ring"));
            named.put("FlightRecorder.what[R]", get(rec, "what"));
            named.put("PadSynchronizer[W opKind,wait*]", sync);
            named.put("Waiter[W polls]", waiter);
            named.put("IdleStrategy[W spins]", get(waiter, "idleStrategy"));
            named.put("Group", get(hc, "group"));
            named.put("scratch", get(hc, "scratch"));
            named.put("reducer", get(hc, "reducer"));
            for (var e : named.entrySet()) {
                Object o = e.getValue();
                objs.add(new Obj(r, e.getKey(), VM.current().addressOf(o), VM.current().sizeOf(o)));
            }
        }
        objs.add(new Obj(-1, "CoarseClock mirror", VM.current().addressOf(org.symmem4j.parallel.trace.CoarseClock.class), VM.current().sizeOf(org.symmem4j.parallel.trace.CoarseClock.class)));
        objs.sort(Comparator.comparingLong(Obj::addr));
        for (Obj o : objs) {
            System.out.printf("%#014x +%6d  lines %x..%x  rank %2d %s%n", o.addr, o.size, o.addr >>> 6, (o.addr + o.size - 1) >>> 6, o.rank, o.name);
        }
        // any 64-byte line / 128-byte pair touched by objects of both ranks
        for (int sh : new int[] {6, 7}) {
            for (Obj x : objs) for (Obj y : objs) {
                if (x.rank != 0 || y.rank != 1) continue;
                long xl = x.addr >>> sh, xh = (x.addr + x.size - 1) >>> sh, yl = y.addr >>> sh, yh = (y.addr + y.size - 1) >>> sh;
                if (xl <= yh && yl <= xh) System.out.printf("SHARED %d-byte block: rank0 %s  <->  rank1 %s%n", 1 << sh, x.name, y.name);
            }
        }
        // whole graphs: lines holding objects of both ranks' communicators (not the shared ones)
        if (true) return; GraphLayout l0 = null, l1 = null;
        Set<Long> a0 = l0.addresses(), a1 = l1.addresses();
        TreeMap<Long, List<String>> lines = new TreeMap<>();
        for (long ad : a0) if (!a1.contains(ad)) { var rc = l0.record(ad); long sz = rc.size();
            for (long ln = ad >>> 6; ln <= (ad + sz - 1) >>> 6; ln++) lines.computeIfAbsent(ln, k -> new ArrayList<>()).add("r0:" + rc.klass().getSimpleName() + " " + rc.path()); }
        for (long ad : a1) if (!a0.contains(ad)) { var rc = l1.record(ad); long sz = rc.size();
            for (long ln = ad >>> 6; ln <= (ad + sz - 1) >>> 6; ln++) lines.computeIfAbsent(ln, k -> new ArrayList<>()).add("r1:" + rc.klass().getSimpleName() + " " + rc.path()); }
        int n = 0;
        for (var e : lines.entrySet()) {
            boolean h0 = e.getValue().stream().anyMatch(s -> s.startsWith("r0")), h1 = e.getValue().stream().anyMatch(s -> s.startsWith("r1"));
            if (h0 && h1) { n++; System.out.println("graph line " + Long.toHexString(e.getKey()) + " " + e.getValue()); }
        }
        System.out.println("graph lines shared by both ranks' private objects: " + n);
    }
}
