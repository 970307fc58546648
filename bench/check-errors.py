#!/usr/bin/env python3
"""Checks that every error the product modules construct with a message says how to get out of it.

An exception constructed with a string literal in its arguments (`new SomethingException("..." ...)`,
`new SomethingError(...)`) in a product module's main sources must either
  - name the fix: the message text contains "fix:" (what was expected, what was found, then the fix), directly or
    through a `static final String` constant of the same file whose text does, or
  - be an internal invariant: built by `Invariants.violated(...)`, whose message says how to report it,
unless its line (or the line before) carries the marker comment `// error-message: <why no fix applies>`.
Constructions without a string literal (rethrowing a cause, a message built by a helper method that is itself
checked where it builds the text) are not checked.

Usage: bench/check-errors.py [--list] [MODULE ...]   (exit 1 when a site lacks both; --list prints every site)
"""
import os
import re
import sys

PRODUCT_MODULES = ["parallel", "gradsync", "pipeline", "state", "serving", "launcher",
                   "dl4j-symmem-plugin", "prometheus"]
CONSTRUCTION = re.compile(r"\bnew\s+([A-Z]\w*(?:Exception|Error))\s*\(")
MARKER = "// error-message:"
CONSTANT = re.compile(r"static\s+final\s+String\s+([A-Z][A-Z0-9_]*)\s*=\s*([^;]*);")


def statement_args(text, open_paren):
    """The argument text of a constructor call starting at `open_paren`, string literals kept whole."""
    depth, i, n = 0, open_paren, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            if text.startswith('"""', i):
                end = text.find('"""', i + 3)
                i = n if end < 0 else end + 3
                continue
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == '\\' else 1
        elif c == "'":
            i += 1
            while i < n and text[i] != "'":
                i += 2 if text[i] == '\\' else 1
        elif c == '(':
            depth += 1
        elif c == ')':
            depth -= 1
            if depth == 0:
                return text[open_paren + 1:i]
        i += 1
    return text[open_paren + 1:]


def strip_comments(text):
    """Blanks // and /* */ comments (keeping line numbers), leaving string literals alone."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            keep = text[i:end] if text.startswith(MARKER, i) else " " * (end - i)
            out.append(keep)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif text[i] == '"':
            j = i + 1
            if text.startswith('"""', i):
                j = text.find('"""', i + 3)
                j = n if j < 0 else j + 3
            else:
                while j < n and text[j] != '"' and text[j] != "\n":
                    j += 2 if text[j] == '\\' else 1
                j += 1
            out.append(text[i:j])
            i = j
        elif text[i] == "'":
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def sites(root, module):
    base = os.path.join(root, module, "src", "main", "java")
    for dirpath, _, files in os.walk(base):
        for name in sorted(files):
            if not name.endswith(".java"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                text = strip_comments(f.read())
            lines = text.split("\n")
            fix_constants = {c.group(1) for c in CONSTANT.finditer(text) if re.search(r"fix:", c.group(2), re.IGNORECASE)}
            for m in CONSTRUCTION.finditer(text):
                args = statement_args(text, m.end() - 1)
                if '"' not in args:
                    continue
                line = text.count("\n", 0, m.start()) + 1
                window = lines[max(0, line - 2):line]
                if any(MARKER in l for l in window):
                    kind = "marked"
                elif re.search(r"fix:", args, re.IGNORECASE) or any(re.search(r"\b" + c + r"\b", args)
                                                                    for c in fix_constants):
                    kind = "fix"
                else:
                    kind = "missing"
                yield os.path.relpath(path, root), line, m.group(1), kind


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    list_all = "--list" in argv
    modules = [a for a in argv if not a.startswith("--")] or PRODUCT_MODULES
    counts, missing = {}, []
    for module in modules:
        for path, line, exc, kind in sites(root, module):
            counts.setdefault(module, {"fix": 0, "marked": 0, "missing": 0})[kind] += 1
            if kind == "missing":
                missing.append(f"{path}:{line}: new {exc}(...) names no fix (add '; fix: ...', or use"
                               f" Invariants.violated for an internal invariant)")
            elif list_all:
                print(f"{path}:{line}: {kind}")
    for module, c in counts.items():
        print(f"check-errors: {module}: {c['fix']} name a fix, {c['marked']} marked, {c['missing']} missing",
              file=sys.stderr)
    for m in missing:
        print(m)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
