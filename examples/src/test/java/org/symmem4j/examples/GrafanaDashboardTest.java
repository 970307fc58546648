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
    private static final Pattern METRIC = Pattern.compile("\\bsymmem_[a-z0-9_]+");
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
                assertEquals("${DS_PROMETHEUS}", asObject(target.get("datasource"), title).get("uid"), title);
                queried++;
            }
        }
        assertTrue(queried >= 20, "expected the dashboard's queries, found " + queried);
        List<String> titles = panels.stream().map(p -> (String) p.get("title")).toList();
        for (String expected : List.of("Throughput", "Loss", "Compute per step, per worker", "Sync per step, per worker",
                "Pipeline bubble", "Pipeline compute per step, per rank")) {
            assertTrue(titles.contains(expected), "panel " + expected + " in " + titles);
        }
        Map<String, Object> variable = variable(dashboard);
        assertEquals("application", variable.get("name"), "the application variable (job is Prometheus' own label)");
    }

    /** Every {@code symmem_*} name in every query exists in the scrape, and so does every label it groups by. */
    @Test
    void everyQueryNamesMetersAndLabelsThatExist() {
        List<String> queries = new ArrayList<>(queries(dashboard));
        queries.add((String) variable(dashboard).get("definition"));
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

    /** The dashboard's one template variable. */
    static Map<String, Object> variable(Map<String, Object> dashboard) {
        List<Object> list = asList(asObject(dashboard.get("templating"), "templating").get("list"), "templating.list");
        assertEquals(1, list.size(), "template variables " + list);
        return asObject(list.getFirst(), "variable");
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
