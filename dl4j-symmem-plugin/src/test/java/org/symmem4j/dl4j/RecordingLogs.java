package org.symmem4j.dl4j;

import java.util.ArrayList;
import java.util.List;
import org.slf4j.ILoggerFactory;
import org.slf4j.IMarkerFactory;
import org.slf4j.Marker;
import org.slf4j.event.Level;
import org.slf4j.helpers.AbstractLogger;
import org.slf4j.helpers.BasicMarkerFactory;
import org.slf4j.helpers.MessageFormatter;
import org.slf4j.helpers.NOPMDCAdapter;
import org.slf4j.spi.MDCAdapter;
import org.slf4j.spi.SLF4JServiceProvider;

/**
 * The plugin tests' SLF4J binding: discards everything, as SLF4J's no-op fallback did, except while a
 * test records ({@link #record}), so tests can check what the library logs.
 */
public final class RecordingLogs {

    /** One formatted log line. */
    public record Line(String logger, Level level, String message) {
    }

    private static final List<Line> LINES = new ArrayList<>();
    private static volatile boolean recording;

    private RecordingLogs() {
    }

    /** Runs {@code action} and returns what was logged meanwhile, by any thread. */
    public static synchronized List<Line> record(Runnable action) {
        synchronized (LINES) {
            LINES.clear();
        }
        recording = true;
        try {
            action.run();
        } finally {
            recording = false;
        }
        synchronized (LINES) {
            return List.copyOf(LINES);
        }
    }

    private static final class RecordingLogger extends AbstractLogger {
        RecordingLogger(String name) {
            this.name = name;
        }

        @Override
        protected String getFullyQualifiedCallerName() {
            return null;
        }

        @Override
        protected void handleNormalizedLoggingCall(Level level, Marker marker, String messagePattern, Object[] arguments,
                                                   Throwable throwable) {
            if (!recording) {
                return;
            }
            String message = MessageFormatter.basicArrayFormat(messagePattern, arguments);
            synchronized (LINES) {
                LINES.add(new Line(name, level, message));
            }
        }

        @Override
        public boolean isTraceEnabled() {
            return false;
        }

        @Override
        public boolean isTraceEnabled(Marker marker) {
            return false;
        }

        @Override
        public boolean isDebugEnabled() {
            return false;
        }

        @Override
        public boolean isDebugEnabled(Marker marker) {
            return false;
        }

        @Override
        public boolean isInfoEnabled() {
            return recording;
        }

        @Override
        public boolean isInfoEnabled(Marker marker) {
            return recording;
        }

        @Override
        public boolean isWarnEnabled() {
            return recording;
        }

        @Override
        public boolean isWarnEnabled(Marker marker) {
            return recording;
        }

        @Override
        public boolean isErrorEnabled() {
            return recording;
        }

        @Override
        public boolean isErrorEnabled(Marker marker) {
            return recording;
        }
    }

    /** Registered in META-INF/services/org.slf4j.spi.SLF4JServiceProvider. */
    public static final class Provider implements SLF4JServiceProvider {
        private final IMarkerFactory markers = new BasicMarkerFactory();
        private final MDCAdapter mdc = new NOPMDCAdapter();
        private final ILoggerFactory loggers = RecordingLogger::new;

        @Override
        public ILoggerFactory getLoggerFactory() {
            return loggers;
        }

        @Override
        public IMarkerFactory getMarkerFactory() {
            return markers;
        }

        @Override
        public MDCAdapter getMDCAdapter() {
            return mdc;
        }

        @Override
        public String getRequestedApiVersion() {
            return "2.0.99";
        }

        @Override
        public void initialize() {
        }
    }
}
