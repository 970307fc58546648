package org.symmem4j.parallel.trace;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A strict JSON reader (RFC 8259) for tests that read back Chrome traces and the metrics endpoint's
 * output (shared through this module's test jar): objects become
 * {@code Map<String, Object>} (keys in order; a duplicate key is an error), arrays {@code List<Object>},
 * numbers {@code Double}, and {@code true}/{@code false}/{@code null} themselves. Anything that is not
 * JSON (a trailing comma, a comment, a single quote, text after the value) throws, naming the offset.
 */
public final class Json {

    private final String text;
    private int pos;

    private Json(String text) {
        this.text = text;
    }

    public static Object parse(String text) {
        Json p = new Json(text);
        Object v = p.value();
        p.whitespace();
        if (p.pos != text.length()) {
            throw p.error("end of input");
        }
        return v;
    }

    private Object value() {
        whitespace();
        if (pos >= text.length()) {
            throw error("a value");
        }
        char c = text.charAt(pos);
        return switch (c) {
            case '{' -> object();
            case '[' -> array();
            case '"' -> string();
            case 't' -> literal("true", Boolean.TRUE);
            case 'f' -> literal("false", Boolean.FALSE);
            case 'n' -> literal("null", null);
            default -> number();
        };
    }

    private Map<String, Object> object() {
        Map<String, Object> out = new LinkedHashMap<>();
        pos++; // {
        whitespace();
        if (peek() == '}') {
            pos++;
            return out;
        }
        while (true) {
            whitespace();
            if (peek() != '"') {
                throw error("a string key");
            }
            int keyAt = pos;
            String key = string();
            whitespace();
            expect(':');
            if (out.containsKey(key)) {
                pos = keyAt;
                throw error("a key not seen before in this object (duplicate \"" + key + "\")");
            }
            out.put(key, value());
            whitespace();
            char c = next();
            if (c == '}') {
                return out;
            }
            if (c != ',') {
                pos--;
                throw error("',' or '}'");
            }
        }
    }

    private List<Object> array() {
        List<Object> out = new ArrayList<>();
        pos++; // [
        whitespace();
        if (peek() == ']') {
            pos++;
            return out;
        }
        while (true) {
            out.add(value());
            whitespace();
            char c = next();
            if (c == ']') {
                return out;
            }
            if (c != ',') {
                pos--;
                throw error("',' or ']'");
            }
        }
    }

    private String string() {
        pos++; // opening quote
        StringBuilder b = new StringBuilder();
        while (true) {
            char c = next();
            if (c == '"') {
                return b.toString();
            }
            if (c < 0x20) {
                pos--;
                throw error("no raw control character inside a string");
            }
            if (c != '\\') {
                b.append(c);
                continue;
            }
            char e = next();
            switch (e) {
                case '"', '\\', '/' -> b.append(e);
                case 'b' -> b.append('\b');
                case 'f' -> b.append('\f');
                case 'n' -> b.append('\n');
                case 'r' -> b.append('\r');
                case 't' -> b.append('\t');
                case 'u' -> {
                    if (pos + 4 > text.length()) {
                        throw error("four hex digits");
                    }
                    b.append((char) Integer.parseInt(text.substring(pos, pos + 4), 16));
                    pos += 4;
                }
                default -> {
                    pos--;
                    throw error("an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
                }
            }
        }
    }

    private Double number() {
        int start = pos;
        if (peek() == '-') {
            pos++;
        }
        if (peek() == '0') {
            pos++;
        } else if (Character.isDigit(peek())) {
            while (Character.isDigit(peek())) {
                pos++;
            }
        } else {
            throw error("a value");
        }
        if (peek() == '.') {
            pos++;
            digits();
        }
        if (peek() == 'e' || peek() == 'E') {
            pos++;
            if (peek() == '+' || peek() == '-') {
                pos++;
            }
            digits();
        }
        return Double.parseDouble(text.substring(start, pos));
    }

    private void digits() {
        if (!Character.isDigit(peek())) {
            throw error("a digit");
        }
        while (Character.isDigit(peek())) {
            pos++;
        }
    }

    private Object literal(String word, Object value) {
        if (!text.startsWith(word, pos)) {
            throw error("a value");
        }
        pos += word.length();
        return value;
    }

    private void whitespace() {
        while (pos < text.length() && " \t\r\n".indexOf(text.charAt(pos)) >= 0) {
            pos++;
        }
    }

    private char peek() {
        return pos < text.length() ? text.charAt(pos) : '\0';
    }

    private char next() {
        if (pos >= text.length()) {
            throw error("more input");
        }
        return text.charAt(pos++);
    }

    private void expect(char c) {
        if (next() != c) {
            pos--;
            throw error("'" + c + "'");
        }
    }

    private IllegalArgumentException error(String expected) {
        int line = 1;
        int column = 1;
        for (int i = 0; i < pos && i < text.length(); i++) {
            if (text.charAt(i) == '\n') {
                line++;
                column = 1;
            } else {
                column++;
            }
        }
        String found = pos < text.length() ? "'" + text.charAt(pos) + "'" : "end of input";
        return new IllegalArgumentException("invalid JSON at line=" + line + " column=" + column + " offset=" + pos
                + ": expected " + expected + ", found " + found);
    }
}
