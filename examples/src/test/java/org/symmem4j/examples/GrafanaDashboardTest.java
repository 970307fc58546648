package org.symmem4j.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.core.instrument.Tags;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.symmem4j.parallel.trace.Json;

/**
 * The Grafana dashboard {@code examples/grafana/symmem4j-gradsync.json} is valid JSON of the shape
 * Grafana imports, and every metric and grouping label its PromQL names exists in a scrape of what
 * the data-parallel wrapper and the pipeline trainer really record (trained here, in this JVM). A
 * misspelt or renamed meter fails here, without a Prometheus server; {@link PrometheusScrapeTest}
 * runs the same queries through one.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class GrafanaDashboardTest {

    static final Path DASHBOARD =
            Path.of(System.getProperty("basedir", "."), "grafana", "symmem4j-gradsync.json");
    private static final Pattern METRIC = Pattern.compile("\\bsymmem(4j)?_[a-z0-9_]+");
    private static final Pattern BY = Pattern.compile("\\bby\\s*\\(([^)]*)\\)");
    /** Labels Prometheus adds at scrape time. */
    private static final Set<String> SCRAPE_LABELS = Set.of("instance", "job");

    private Map<String, Object> dashboard;
    /** Sample name to the label names it carries, from a scrape of real training runs. */
    private final Map<String, Set<String>> scraped = new HashMap<>();

    @BeforeAll
    void readDashboardAndScrapeRealRuns() throws IOException {
        dashboard = asObject(Json.parse(Files.readString(DASHBOARD)), "dashboard");
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        InProcessTraining.dataParallel(registry, Tags.of("application", "dashboard-test"), 3);
        InProcessTraining.pipeline(registry, Tags.of("application", "dashboard-test"), 3);
        for (PrometheusScrapeTest.ExpositionSample s : PrometheusScrapeTest.ExpositionSample.parse(registry.scrape())) {
            scraped.computeIfAbsent(s.name(), k -> new TreeSet<>()).addAll(s.labels().keySet());
        }
    }

    /** What Grafana needs to import it: panels with ids, grid positions and Prometheus targets, and the variable. */
    @Test
    void dashboardHasTheShapeGrafanaImports() {
        assertEquals("symmem4j-gradsync", dashboard.get("uid"));
        List<Map<String, Object>> panels = panels();
        Set<Double> ids = new HashSet<>();
        int queried = 0;
        for (Map<String, Object> p : panels) {
            String title = (String) p.get("title");
            assertTrue(ids.add((Double) p.get("id")), "panel ids are unique: " + title);
            Map<String, Object> grid = asObject(p.get("gridPos"), title + ".gridPos");
            for (String k : List.of("x", "y", "w", "h")) {
                assertTrue(grid.get(k) instanceof Double, title + ".gridPos." + k);
            }
            if (p.get("type").equals("row")) {
                continue;
            }
            assertEquals("timeseries", p.get("type"), title);
            List<Object> targets = asList(p.get("targets"), title + ".targets");
            assertFalse(targets.isEmpty(), "panel " + title + " has no query");
            for (Object t : targets) {
                Map<String, Object> target = asObject(t, title + " target");
                assertTrue(target.get("expr") instanceof String e && !e.isBlank(), title + " target without expr");
                assertEquals("${datasource}", asObject(target.get("datasource"), title).get("uid"), title);
                queried++;
            }
        }
        assertTrue(queried >= 20, "expected the dashboard's queries, found " + queried);
        List<String> titles = panels.stream().map(p -> (String) p.get("title")).toList();
        for (String expected : List.of("Throughput", "Loss", "Compute per step, per worker", "Sync per step, per worker",
                "Pipeline bubble", "Pipeline compute per step, per rank")) {
            assertTrue(titles.contains(expected), "panel " + expected + " in " + titles);
        }
        assertEquals("query", variable(dashboard, "application").get("type"), "the application variable");
        assertEquals("query", variable(dashboard, "job").get("type"), "the job variable (Prometheus' scrape job)");
    }

    /**
     * File provisioning loads the JSON as it is, without the UI's import step that fills {@code __inputs}:
     * so the board has no {@code __inputs} and no {@code ${DS_...}} placeholder, its data source is a
     * {@code datasource} variable of type prometheus (which starts at the default data source), every
     * panel and query uses that variable, and the provisioning files ship beside it.
     */
    @Test
    void provisioningLoadsTheBoardWithoutTheImportStep() throws IOException {
        assertFalse(dashboard.containsKey("__inputs"), "__inputs is resolved only by the UI import");
        String text = Files.readString(DASHBOARD);
        assertFalse(text.contains("${DS_"), "an import-only data source placeholder is left in the board");
        Map<String, Object> ds = variable(dashboard, "datasource");
        assertEquals("datasource", ds.get("type"));
        assertEquals("prometheus", ds.get("query"));
        for (Map<String, Object> p : panels()) {
            if (!p.get("type").equals("row")) {
                assertEquals("${datasource}", asObject(p.get("datasource"), "panel datasource").get("uid"), (String) p.get("title"));
            }
        }
        Path provisioning = DASHBOARD.getParent().resolve("provisioning");
        String provider = Files.readString(provisioning.resolve("dashboards/symmem4j.yaml"));
        for (String line : List.of("apiVersion: 1", "type: file", "path: /var/lib/grafana/dashboards/symmem4j")) {
            assertTrue(provider.contains(line), "dashboard provider lacks '" + line + "':\n" + provider);
        }
        String datasource = Files.readString(provisioning.resolve("datasources/prometheus.yaml"));
        assertTrue(datasource.contains("type: prometheus") && datasource.contains("isDefault: true"), datasource);
    }

    /**
     * No panel merges applications: every metric selector filters by the {@code job} and
     * {@code application} variables, and every aggregation keeps both labels, so two applications (or
     * two jobs with the same application tag) are never summed into one series.
     */
    @Test
    void noQueryMergesApplicationsOrJobs() {
        Pattern aggregation = Pattern.compile("\\b(sum|avg|max|min|count)\\s*(by\\s*\\(([^)]*)\\))?\\s*\\(");
        Pattern selector = Pattern.compile("\\bsymmem_[a-z0-9_]+(\\{[^}]*\\})?");
        for (String q : queries(dashboard)) {
            Matcher a = aggregation.matcher(q);
            while (a.find()) {
                assertTrue(a.group(3) != null, "an aggregation without by(...) merges applications: " + q);
                List<String> labels = List.of(a.group(3).split("\\s*,\\s*"));
                assertTrue(labels.contains("job") && labels.contains("application"),
                        "an aggregation that drops job or application: by (" + a.group(3) + ") in " + q);
            }
            Matcher m = selector.matcher(q);
            while (m.find()) {
                String labels = m.group(1) == null ? "" : m.group(1);
                assertTrue(labels.contains("job=~\"$job\"") && labels.contains("application=~\"$application\""),
                        "a selector not filtered by $job and $application: " + m.group() + " in " + q);
            }
        }
    }

    /** Every {@code symmem_*} name in every query exists in the scrape, and so does every label it groups by. */
    @Test
    void everyQueryNamesMetersAndLabelsThatExist() {
        List<String> queries = new ArrayList<>(queries(dashboard));
        queries.add((String) variable(dashboard, "application").get("definition"));
        queries.add((String) variable(dashboard, "job").get("definition"));
        Set<String> named = new TreeSet<>();
        for (String q : queries) {
            List<String> metrics = METRIC.matcher(q).results().map(java.util.regex.MatchResult::group).toList();
            assertFalse(metrics.isEmpty(), "a query naming no symmem_ metric: " + q);
            for (String m : metrics) {
                assertTrue(scraped.containsKey(m), "query names " + m + ", which no scrape has: " + q
                        + "\nscraped names: " + scraped.keySet());
                named.add(m);
            }
            Matcher by = BY.matcher(q);
            while (by.find()) {
                for (String label : by.group(1).split(",")) {
                    String l = label.strip();
                    if (l.isEmpty() || SCRAPE_LABELS.contains(l)) {
                        continue;
                    }
                    assertTrue(metrics.stream().anyMatch(m -> scraped.get(m).contains(l)),
                            "query groups by " + l + ", which none of " + metrics + " carries: " + q);
                }
            }
        }
        System.out.println("dashboard queries name " + named.size() + " metrics: " + named);
    }

    // ---------------------------------------------------------------------------------------------

    private List<Map<String, Object>> panels() {
        return asList(dashboard.get("panels"), "panels").stream().map(p -> asObject(p, "panel")).toList();
    }

    /** The {@code expr} of every target of every panel. */
    static List<String> queries(Map<String, Object> dashboard) {
        List<String> out = new ArrayList<>();
        for (Object p : asList(dashboard.get("panels"), "panels")) {
            Object targets = asObject(p, "panel").get("targets");
            if (targets != null) {
                for (Object t : asList(targets, "targets")) {
                    out.add((String) asObject(t, "target").get("expr"));
                }
            }
        }
        return out;
    }

    /** The dashboard's template variable {@code name}. */
    static Map<String, Object> variable(Map<String, Object> dashboard, String name) {
        List<Object> list = asList(asObject(dashboard.get("templating"), "templating").get("list"), "templating.list");
        List<String> names = new ArrayList<>();
        for (Object v : list) {
            Map<String, Object> variable = asObject(v, "variable");
            if (name.equals(variable.get("name"))) {
                return variable;
            }
            names.add((String) variable.get("name"));
        }
        throw new AssertionError("no template variable " + name + "; found " + names);
    }

    static Map<String, Object> readDashboard() throws IOException {
        return asObject(Json.parse(Files.readString(DASHBOARD)), "dashboard");
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> asObject(Object o, String what) {
        assertTrue(o instanceof Map, what + " is a JSON object: " + o);
        return (Map<String, Object>) o;
    }

    @SuppressWarnings("unchecked")
    private static List<Object> asList(Object o, String what) {
        assertTrue(o instanceof List, what + " is a JSON array: " + o);
        return (List<Object>) o;
    }
}
