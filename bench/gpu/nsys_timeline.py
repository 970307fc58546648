#!/usr/bin/env python3
"""Draws one window of an Nsight Systems timeline as an SVG, from the SQLite export of a report.

    nsys export --type sqlite -o run.sqlite run.nsys-rep     (or: nsys stats ... writes run.sqlite beside it)
    bench/gpu/nsys_timeline.py run.sqlite out.svg [--range "symmem4j tp_mlp forward"] [--instance N] [--until "..."]

The window starts at the N-th instance (default: the middle one, past the warm-up) of the NVTX range named by
--range on its thread, and ends where the first instance of --until on that thread that ends after it ends
(default: the same range, so one instance). Rows: every thread's NVTX ranges in the window (nested ranges one
row lower), then every GPU stream's kernels and copies. It is what the Nsight Systems GUI shows in its NVTX and
CUDA rows, drawn without the GUI so the docs can show it. Only Python's standard library (sqlite3) is used.
"""
import argparse
import html
import sqlite3
import sys

PUSH_POP = 59      # NVTX_EVENTS.eventType of a push/pop range
START_END = 60     # of a start/end range
DOMAIN_CREATE = 75 # of a domain's creation: its text is the domain's name

WIDTH = 1400
LABEL = 230
ROW = 20
TOP = 40


def tables(db):
    return {r[0] for r in db.execute("select name from sqlite_master where type='table'")}


def strings(db):
    return dict(db.execute("select id, value from StringIds"))


def nvtx_ranges(db, names):
    """(start, end, thread id, label) of every NVTX range, the domain's name in front as nsys's nvtx_sum prints it."""
    domains = {}
    for domain_id, text in db.execute("select domainId, text from NVTX_EVENTS where eventType = ?", (DOMAIN_CREATE,)):
        domains[domain_id] = text
    rows = []
    for start, end, text, text_id, tid, domain_id in db.execute(
            "select start, end, text, textId, globalTid, domainId from NVTX_EVENTS"
            " where eventType in (?, ?) and end is not null", (PUSH_POP, START_END)):
        label = text if text is not None else names.get(text_id, "?")
        domain = domains.get(domain_id)
        rows.append((start, end, tid & 0xFFFFFF, (domain + ":" if domain else "") + label))
    return rows


def gpu_activities(db, names, have):
    """(start, end, 'GPU d stream s', label, kind) of every kernel and copy."""
    rows = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in have:
        for start, end, device, stream, short in db.execute(
                "select start, end, deviceId, streamId, shortName from CUPTI_ACTIVITY_KIND_KERNEL"):
            rows.append((start, end, "GPU %d stream %d" % (device, stream), names.get(short, "kernel"), "kernel"))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in have:
        for start, end, device, stream, size in db.execute(
                "select start, end, deviceId, streamId, bytes from CUPTI_ACTIVITY_KIND_MEMCPY"):
            rows.append((start, end, "GPU %d stream %d" % (device, stream), "copy %d KiB" % (size // 1024), "copy"))
    return rows


def colour(label, kind):
    low = label.lower()
    if kind == "copy":
        return "#9b59b6"
    if "nccl" in low:
        return "#e67e22"
    if kind == "kernel" and any(k in low for k in ("gemm", "nvjet", "cutlass", "sm90", "xmma")):
        return "#27ae60"
    if kind == "kernel":
        return "#2e86c1"
    return "#5dade2" if low.startswith("symmem4j") else "#f5b041"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sqlite")
    p.add_argument("svg")
    p.add_argument("--range", default="symmem4j tp_mlp forward", help="the NVTX range that opens the window")
    p.add_argument("--until", default=None, help="the NVTX range whose end closes it (default: --range)")
    p.add_argument("--instance", type=int, default=None, help="which instance of --range (default: the middle one)")
    p.add_argument("--title", default=None)
    a = p.parse_args()

    db = sqlite3.connect(a.sqlite)
    have = tables(db)
    if "NVTX_EVENTS" not in have:
        sys.exit("nsys_timeline: %s has no NVTX_EVENTS table: expected a report recorded with -t nvtx;"
                 " fix: profile with nsys profile -t cuda,nvtx" % a.sqlite)
    names = strings(db)
    ranges = nvtx_ranges(db, names)
    opening = sorted(r for r in ranges if r[3].split(":", 1)[-1] == a.range)
    if not opening:
        found = sorted({r[3] for r in ranges})
        sys.exit("nsys_timeline: no NVTX range named %r; found: %s; fix: pass --range with one of them" % (a.range, found))
    index = len(opening) // 2 if a.instance is None else a.instance
    if not 0 <= index < len(opening):
        sys.exit("nsys_timeline: --instance %d, expected 0 .. %d" % (index, len(opening) - 1))
    t0, first_end, tid, _ = opening[index]
    until = a.until or a.range
    closing = sorted(r for r in ranges if r[2] == tid and r[3].split(":", 1)[-1] == until and r[1] >= first_end)
    t1 = closing[0][1] if closing else first_end
    pad = (t1 - t0) // 20
    t0, t1 = t0 - pad, t1 + pad

    rows = {}  # row label -> [(start, end, label, kind)]
    order = []

    def add(row, item):
        if row not in rows:
            rows[row] = []
            order.append(row)
        rows[row].append(item)

    # NVTX: per thread, nested ranges one row lower each
    per_thread = {}
    for start, end, thread, label in ranges:
        if end > t0 and start < t1:
            per_thread.setdefault(thread, []).append((start, end, label))
    for thread in sorted(per_thread):
        stack = []
        for start, end, label in sorted(per_thread[thread], key=lambda r: (r[0], -r[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            depth = len(stack)
            stack.append(end)
            add("thread %d NVTX%s" % (thread, "" if depth == 0 else " +%d" % depth), (start, end, label, "nvtx"))
    for start, end, row, label, kind in sorted(gpu_activities(db, names, have), key=lambda r: (r[2], r[0])):
        if end > t0 and start < t1:
            add(row, (start, end, label, kind))

    def x(t):
        return LABEL + (WIDTH - LABEL - 10) * (t - t0) / float(t1 - t0)

    height = TOP + ROW * len(order) + 40
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="10">'
           % (WIDTH, height), '<rect width="100%" height="100%" fill="white"/>']
    title = a.title or "nsys timeline: %s, %.0f µs" % (a.range, (t1 - t0) / 1000.0)
    out.append('<text x="10" y="18" font-size="13">%s</text>' % html.escape(title))
    span_us = (t1 - t0) / 1000.0
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 1e9) if span_us / s <= 12)
    tick = 0.0
    while tick <= span_us:
        xx = x(t0 + tick * 1000)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (xx, TOP - 8, xx, height - 30))
        out.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%g µs</text>' % (xx, height - 18, tick))
        tick += step
    for i, row in enumerate(order):
        y = TOP + i * ROW
        out.append('<text x="6" y="%d">%s</text>' % (y + 13, html.escape(row)))
        for start, end, label, kind in rows[row]:
            x0, x1 = max(x(start), LABEL), min(x(end), WIDTH - 10)
            w = max(x1 - x0, 0.8)
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="white" stroke-width="0.3">'
                       '<title>%s (%.1f µs)</title></rect>'
                       % (x0, y + 2, w, ROW - 4, colour(label, kind), html.escape(label), (end - start) / 1000.0))
            text = label.split(":", 1)[-1].replace("symmem4j ", "")
            if w > 6 * len(text) * 0.9:
                out.append('<text x="%.1f" y="%d" fill="white">%s</text>' % (x0 + 3, y + 14, html.escape(text)))
    out.append("</svg>")
    with open(a.svg, "w") as f:
        f.write("\n".join(out))
    print("nsys_timeline: %s: %d rows, %.0f µs from %s instance %d of %d" % (a.svg, len(order), span_us, a.range, index,
                                                                           len(opening)))


if __name__ == "__main__":
    main()
