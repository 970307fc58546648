#!/usr/bin/env python3
"""Checks the documentation's relative links: README.md, CONTRIBUTING.md and docs/**/*.md.

Every relative link or image must name a file or folder that exists, and an #anchor must name a heading of the
target markdown file (or of the same file) under both slug rules the docs are read with: GitHub's (the
repository's pages) and Python-Markdown's toc (the MkDocs site), so a link works in both places. A page under
docs/ may link only inside docs/ (the site serves nothing else; name other files of the repository in code
spans), and every page under docs/ must be in mkdocs.yml's nav (adding a page is one line there).

Links into docs/api/ (the javadoc, copied in by check-docs.sh --javadoc) are checked only when it is there.
Exits 1 listing every broken link as FILE:LINE: problem; prints a one-line summary otherwise. Python 3 only,
no packages.

    bench/check-docs.py [ROOT]
"""
import os
import re
import sys
import unicodedata

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
DOCS = os.path.join(ROOT, 'docs')
API = os.path.join(DOCS, 'api')

FENCE = re.compile(r'^\s*(`{3,}|~{3,})')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')
# [text](target) or ![alt](target); the target ends at whitespace or ')' (titles are not used here)
LINK = re.compile(r'!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
CODE_SPAN = re.compile(r'(`+)(.+?)\1')


def markdown_files():
    files = [os.path.join(ROOT, f) for f in ('README.md', 'CONTRIBUTING.md') if os.path.isfile(os.path.join(ROOT, f))]
    for base, dirs, names in os.walk(DOCS):
        dirs[:] = sorted(d for d in dirs if os.path.join(base, d) != API)
        files += [os.path.join(base, n) for n in sorted(names) if n.endswith('.md')]
    return files


def lines_outside_code(text):
    """(line number, line) of every line outside fenced code blocks, with inline code spans blanked."""
    fence = None
    for number, line in enumerate(text.split('\n'), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence) and not line.strip()[len(fence):].strip():
                fence = None
            continue
        yield number, CODE_SPAN.sub(lambda c: ' ' * len(c.group(0)), line)


def heading_text(raw):
    """A heading as rendered text: links to their text, code spans to their content, emphasis and HTML gone."""
    t = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', raw)
    t = re.sub(r'(`+)(.+?)\1', r'\2', t)
    t = re.sub(r'<[^>]+>', '', t)
    t = re.sub(r'(\*\*|__|\*|_)(\S.*?\S|\S)\1', r'\2', t)
    return t


def github_slug(text):
    t = heading_text(text).strip().lower()
    t = re.sub(r'[^\w\- ]', '', t)
    return t.replace(' ', '-')


def mkdocs_slug(text):
    # Python-Markdown's toc.slugify, which MkDocs uses by default
    t = unicodedata.normalize('NFKD', heading_text(text)).encode('ascii', 'ignore').decode('ascii')
    t = re.sub(r'[^\w\s-]', '', t).strip().lower()
    return re.sub(r'[-\s]+', '-', t)


_anchors = {}


def anchors(path):
    """The anchors a markdown file offers: (GitHub's, MkDocs'), duplicates numbered as each renderer does."""
    if path not in _anchors:
        gh, mk, seen_gh, seen_mk = set(), set(), {}, {}
        with open(path, encoding='utf-8') as f:
            text = f.read()
        fence = None
        for line in text.split('\n'):
            m = FENCE.match(line)
            if fence is None and m:
                fence = m.group(1)
                continue
            if fence is not None:
                if line.strip().startswith(fence) and not line.strip()[len(fence):].strip():
                    fence = None
                continue
            h = HEADING.match(line)
            if not h:
                continue
            for slug, seen, out, sep in ((github_slug(h.group(2)), seen_gh, gh, '-'),
                                         (mkdocs_slug(h.group(2)), seen_mk, mk, '_')):
                n = seen.get(slug, 0)
                out.add(slug if n == 0 else f'{slug}{sep}{n}')
                seen[slug] = n + 1
        for explicit in re.findall(r'<a\s+(?:id|name)="([^"]+)"', text):
            gh.add(explicit)
            mk.add(explicit)
        _anchors[path] = (gh, mk)
    return _anchors[path]


def nav_pages():
    """Pages named in mkdocs.yml's nav (relative to docs/)."""
    path = os.path.join(ROOT, 'mkdocs.yml')
    if not os.path.isfile(path):
        return None
    pages, in_nav = set(), False
    with open(path, encoding='utf-8') as f:
        for line in f:
            if re.match(r'^nav:\s*$', line):
                in_nav = True
                continue
            if in_nav and re.match(r'^\S', line):
                break
            if line.strip().startswith('#'):
                continue  # a commented-out entry: a page not there yet
            m = re.search(r':\s*(\S+\.md)\s*$', line) or re.search(r'^\s*-\s*(\S+\.md)\s*$', line)
            if in_nav and m:
                pages.add(m.group(1))
    return pages


def check():
    problems, links = [], 0
    for path in markdown_files():
        rel = os.path.relpath(path, ROOT)
        in_docs = path.startswith(DOCS + os.sep)
        with open(path, encoding='utf-8') as f:
            text = f.read()
        for number, line in lines_outside_code(text):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', target) or target.startswith('//'):
                    continue  # http:, https:, mailto:, ...
                links += 1
                where = f'{rel}:{number}'
                file_part, _, anchor = target.partition('#')
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                if resolved == API or resolved.startswith(API + os.sep):
                    if not os.path.isdir(API):
                        continue
                if in_docs and not (resolved == DOCS or resolved.startswith(DOCS + os.sep)):
                    problems.append(f'{where}: {target} leaves docs/, which the site does not serve'
                                    f' (name the file in a code span, or link a page under docs/)')
                    continue
                if not os.path.exists(resolved):
                    problems.append(f'{where}: {target}: no such file {os.path.relpath(resolved, ROOT)}')
                    continue
                if anchor:
                    if not resolved.endswith('.md'):
                        problems.append(f'{where}: {target}: an anchor into a file that is not markdown')
                        continue
                    gh, mk = anchors(resolved)
                    if anchor not in gh or anchor not in mk:
                        near = sorted(gh & mk, key=lambda a: -len(os.path.commonprefix([a, anchor])))[:3]
                        which = ('on GitHub nor on the site' if anchor not in gh and anchor not in mk
                                 else 'on the site' if anchor not in mk else 'on GitHub')
                        problems.append(f'{where}: {target}: no heading with anchor #{anchor} in'
                                        f' {os.path.relpath(resolved, ROOT)} {which} (nearest: {", ".join(near)})')
    nav = nav_pages()
    if nav is not None:
        for path in markdown_files():
            if path.startswith(DOCS + os.sep):
                page = os.path.relpath(path, DOCS)
                if page not in nav:
                    problems.append(f'docs/{page}: not in mkdocs.yml\'s nav (add a line for it there)')
        for page in sorted(nav):
            if not os.path.isfile(os.path.join(DOCS, page)):
                problems.append(f'mkdocs.yml: nav names {page}, which docs/ lacks')
    return problems, links


if __name__ == '__main__':
    found, count = check()
    if found:
        print('\n'.join(found))
        print(f'check-docs: {len(found)} broken of {count} relative links (or nav entries)', file=sys.stderr)
        sys.exit(1)
    print(f'check-docs: {count} relative links in {len(markdown_files())} files resolve')
