import java.lang.classfile.ClassFile;
import java.lang.classfile.ClassModel;
import java.lang.classfile.FieldModel;
import java.lang.classfile.MethodModel;
import java.lang.classfile.constantpool.ClassEntry;
import java.lang.classfile.constantpool.FieldRefEntry;
import java.lang.classfile.constantpool.MemberRefEntry;
import java.lang.classfile.constantpool.PoolEntry;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

/**
 * Checks that every Agrona class, method and field the given jars use exists in the given Agrona jar (walking
 * supertypes), so that Aeron built against one Agrona 2.x runs with the Agrona 2.x the ring benchmark measures.
 * Run with JDK 25's source launcher (the ClassFile API):
 * <pre>
 *   java bench/shared-state/AgronaLinkCheck.java agrona.jar aeron-client.jar aeron-driver.jar
 * </pre>
 * Prints each missing member and exits 1 when any is missing, else prints the count checked and exits 0.
 */
public class AgronaLinkCheck {
    private static final Map<String, ClassModel> AGRONA = new HashMap<>();

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: AgronaLinkCheck agrona.jar user.jar... (expected an Agrona jar and the jars using it)");
            System.exit(2);
        }
        load(args[0], AGRONA);
        int refs = 0;
        Set<String> missing = new TreeSet<>();
        for (int i = 1; i < args.length; i++) {
            Map<String, ClassModel> users = new HashMap<>();
            load(args[i], users);
            for (ClassModel user : users.values()) {
                String by = " (used by " + user.thisClass().asInternalName() + ")";
                for (PoolEntry e : user.constantPool()) {
                    if (e instanceof ClassEntry c && agrona(c.asInternalName()) && !AGRONA.containsKey(c.asInternalName())
                            && !c.asInternalName().startsWith("[")) {
                        missing.add("class " + c.asInternalName() + by);
                    } else if (e instanceof MemberRefEntry m && agrona(m.owner().asInternalName())) {
                        refs++;
                        if (!defines(m.owner().asInternalName(), m.name().stringValue(), m.type().stringValue(),
                                m instanceof FieldRefEntry)) {
                            missing.add(m.owner().asInternalName() + "." + m.name() + " " + m.type() + by);
                        }
                    }
                }
            }
        }
        missing.forEach(m -> System.out.println("MISSING " + m));
        System.out.println("Agrona members used: " + refs + ", missing in " + args[0] + ": " + missing.size());
        System.exit(missing.isEmpty() ? 0 : 1);
    }

    private static boolean agrona(String internalName) {
        return internalName.startsWith("org/agrona/");
    }

    private static boolean defines(String owner, String name, String type, boolean field) {
        Deque<String> todo = new ArrayDeque<>(List.of(owner));
        while (!todo.isEmpty()) {
            String c = todo.poll();
            ClassModel cm = AGRONA.get(c);
            if (cm == null) {
                if (!agrona(c)) {
                    return true; // a JDK supertype: its members are the JDK's
                }
                continue;
            }
            if (field) {
                for (FieldModel f : cm.fields()) {
                    if (f.fieldName().equalsString(name) && f.fieldType().equalsString(type)) {
                        return true;
                    }
                }
            } else {
                for (MethodModel m : cm.methods()) {
                    if (m.methodName().equalsString(name) && m.methodType().equalsString(type)) {
                        return true;
                    }
                }
            }
            cm.superclass().ifPresent(s -> todo.add(s.asInternalName()));
            cm.interfaces().forEach(i -> todo.add(i.asInternalName()));
        }
        return false;
    }

    private static void load(String jar, Map<String, ClassModel> into) throws Exception {
        try (JarFile jf = new JarFile(jar)) {
            for (Enumeration<JarEntry> en = jf.entries(); en.hasMoreElements(); ) {
                JarEntry je = en.nextElement();
                String n = je.getName();
                if (n.endsWith(".class") && !n.endsWith("module-info.class") && !n.startsWith("META-INF/")) {
                    ClassModel cm = ClassFile.of().parse(jf.getInputStream(je).readAllBytes());
                    into.put(cm.thisClass().asInternalName(), cm);
                }
            }
        }
    }
}
