#!/usr/bin/env python3
"""Per fork, what C2 made of the flight recorder's hot-path calls (issue #36's bimodal forks).

FlightRecorderCostBench --jit-log makes each fork of FlightRecorderPairedBenchmark write HotSpot's compilation log
(-XX:+LogCompilation) into jit-pid<PID>.log in the run's directory; each fork's set-up line in recorder.txt names its
pid. This script prints, fork by fork in recorder.txt's order (the k-th block matches the k-th per-fork mean in
recorder.md):
  - every C2 compilation (tier 4; OSR marked) that reaches a call of the recorder (FlightRecorder.arrived,
    .completed, .started), with C2's decision for each call ("inline (hot)", "too big", "hot method too big",
    "low call site frequency", "already compiled into a medium method", ...) and the profile it decided from: the
    call site's count against its caller's interpreter invocation count (iicount). C2 compares the share of the
    calls its profile saw (the count scaled by iicount over the profile's own invocations, which the log does not
    give) with InlineFrequencyRatio (0.25: below it a callee over MaxInlineSize, 35 bytes, is not inlined) and
    MinInlineFrequencyRatio (0.0085: below it nothing is); count/iicount is a lower bound of that share, since
    iicount also counts the invocations from before the profile existed;
  - when each such compilation was made not entrant (deoptimised), if it was, and the uncommon traps that hit
    C2 code (reason, method, bci, time), which say whether a fork was still deoptimising during the measurement;
  - the recorder's other methods called on the hot path (ownLineWritten, ownLineSegment, ownLineOffset, entryAt,
    nameBits; since 2026-11-30): one left out of line is a call per collective as surely as a top-level one (a local
    log found a since-removed copying layout's eight put()s in PadSynchronizer.arrive out of line, "low call site
    frequency", while arrived itself was inlined);
  - a one-line verdict: the recorder calls that the C2 code still live at the end calls out of line.
A fork whose recorder calls are inlined in every live compilation pays what the calls cost; a fork with a call
left out (or deoptimising in the measurement) is a JIT fork.

usage: jit-forks.py RUN_DIR   (RUN_DIR holds recorder.txt and the jit-pid*.log files)
"""
import glob
import html
import os
import re
import sys

RECORDER = "org.symmem4j.parallel.control.FlightRecorder"
HOT = ("arrived", "completed", "started")
# the recorder's own methods a hot call runs (own-line's entry points and their helpers); cold ones (dump, failed,
# newNameBits, at, put, ...) are left out: C2 may parse them into a failure branch without that costing a collective
INNER = ("entryAt", "nameBits", "ownLineWritten", "ownLineSegment", "ownLineOffset")
# the control-plane methods that call the recorder behind a null check: parsed without that call, the check was
# compiled as an uncommon trap (never seen taken in the profile) and the recorder's work is not in this code
CALLERS = {("org.symmem4j.parallel.control.PadSynchronizer", "arrive"): "arrived",
           ("org.symmem4j.parallel.control.ControlPlane", "completed"): "completed",
           ("org.symmem4j.parallel.control.ControlPlane", "started"): "started"}
ATTR = re.compile(r"(\w+)='([^']*)'")


def attrs(line):
    return {k: html.unescape(v) for k, v in ATTR.findall(line)}


def parse(path):
    tasks = []  # dict(id, level, osr, method, stamp, calls[(caller, callee, count, uses, reason)])
    dead = {}  # compile id -> stamp of make_not_entrant
    traps = []  # (stamp, compile id, reason, action, method, bci)
    methods, klasses = {}, {}
    task, stack, call = None, [], None
    with open(path, errors="replace") as f:
        for line in f:
            s = line.lstrip()
            if s.startswith("<task "):
                a = attrs(s)
                task = {"id": a.get("compile_id"), "level": a.get("level", "4"), "osr": a.get("compile_kind") == "osr",
                        "method": a.get("method", "?"), "stamp": a.get("stamp", "?"), "calls": []}
                methods, klasses, stack, call = {}, {}, [], None
            elif s.startswith("</task>"):
                if task is not None and task["calls"]:
                    tasks.append(task)
                task = None
            elif task is not None:
                if s.startswith("<klass "):
                    a = attrs(s)
                    klasses[a.get("id")] = a.get("name", "?").replace("/", ".")
                elif s.startswith("<method "):
                    a = attrs(s)
                    methods[a.get("id")] = (klasses.get(a.get("holder"), "?"), a.get("name", "?"), a.get("bytes", "?"),
                                           float(a.get("iicount", "0")))
                elif s.startswith("<parse "):
                    a = attrs(s)
                    caller = methods.get(a.get("method"), ("?", "?", "?", 0.0))
                    stack.append([caller, caller[3], False])  # its interpreter invocation count: C2's divisor
                elif s.startswith("</parse>"):
                    if stack:
                        caller, _, saw = stack.pop()
                        if (caller[0], caller[1]) in CALLERS and not saw:
                            task["calls"].append((caller[0].split(".")[-1] + "." + caller[1],
                                                  CALLERS[(caller[0], caller[1])] + " (no call)", 0.0, 0.0,
                                                  "branch compiled as an uncommon trap or never reached", False))
                elif s.startswith("<call "):
                    a = attrs(s)
                    call = (methods.get(a.get("method"), ("?", "?", "?", 0.0)),
                            float(a.get("count", "0")) * float(a.get("prof_factor", "1")))
                elif (s.startswith("<inline_success") or s.startswith("<inline_fail")) and call is not None:
                    callee, count = call
                    if callee[0].startswith(RECORDER) and (callee[1] in HOT or callee[1] in INNER):
                        caller, uses, _ = stack[-1] if stack else (("?", "?", "?", 0.0), 0.0, False)
                        if stack:
                            stack[-1][2] = True
                        reason = attrs(s).get("reason", "?")
                        ok = s.startswith("<inline_success")
                        task["calls"].append((caller[0].split(".")[-1] + "." + caller[1], callee[1] + " (" + callee[2]
                                              + " bytes)", count, uses, reason, ok))
                    call = None
            elif s.startswith("<make_not_entrant "):
                a = attrs(s)
                if a.get("compiler") == "c2" or a.get("level") == "4":
                    dead[a.get("compile_id")] = a.get("stamp", "?")
            elif s.startswith("<uncommon_trap ") and "thread=" in s:
                a = attrs(s)
                if a.get("compiler") == "c2" or a.get("level") == "4":
                    traps.append((a.get("stamp", "?"), a.get("compile_id"), a.get("reason"), a.get("action"),
                                  a.get("method", "?"), a.get("bci", "?")))
    return tasks, dead, traps


def fork_pids(run_dir):
    pids = []
    path = os.path.join(run_dir, "recorder.txt")
    if os.path.exists(path):
        with open(path, errors="replace") as f:
            for line in f:
                m = re.search(r"flight recorder paired benchmark: .*\bpid (\d+)", line)
                if m:
                    pids.append(m.group(1))
    return pids


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: jit-forks.py RUN_DIR: expected a directory holding recorder.txt and jit-pid*.log, found "
                 + (sys.argv[1] if len(sys.argv) > 1 else "no argument")
                 + " (fix: run FlightRecorderCostBench with --jit-log in that directory, then pass it)")
    run_dir = sys.argv[1]
    logs = {re.sub(r"\D", "", os.path.basename(p)): p for p in glob.glob(os.path.join(run_dir, "jit-*.log"))}
    order = [p for p in fork_pids(run_dir) if p in logs] or sorted(logs)
    if not order:
        sys.exit("no jit-pid*.log in " + run_dir + ": expected one per fork (fix: run FlightRecorderCostBench with"
                 " --jit-log in that directory)")
    for k, pid in enumerate(order, 1):
        tasks, dead, traps = parse(logs[pid])
        print(f"== fork {k} (pid {pid})")
        outline = set()
        for t in tasks:
            if t["level"] != "4":
                continue
            state = "live" if t["id"] not in dead else f"made not entrant at {dead[t['id']]} s"
            print(f"  C2 #{t['id']}{' OSR' if t['osr'] else ''} at {t['stamp']} s, {state}: {t['method']}")
            for caller, callee, count, uses, reason, ok in t["calls"]:
                freq = count / uses if uses else float("nan")
                if uses:
                    print(f"      {caller} -> {callee}: {reason} (call site {count:.0f} / caller iicount {uses:.0f}"
                          f" = {freq:.2f}, a lower bound of C2's share)")
                else:
                    print(f"      {caller} -> {callee}: {reason}")
                if not ok and t["id"] not in dead:
                    outline.add(f"{callee.split(' ')[0]} from {caller} ({reason}, {freq:.2f})")
        listed = {t["id"] for t in tasks}
        for stamp, cid, reason, action, method, bci in traps:
            if cid in listed:
                print(f"  uncommon trap at {stamp} s in C2 #{cid}: {reason}/{action}")
        last = max((float(t[0]) for t in traps if t[0] != "?"), default=float("nan"))
        print(f"  uncommon traps in C2 code: {len(traps)}, the last at {last:.3f} s")
        reached = any(t["level"] == "4" and t["id"] not in dead for t in tasks)
        print("  verdict: " + ("recorder calls out of line (or trapped) in live C2 code: " + "; ".join(sorted(outline))
                               if outline else "every recorder call inlined in the live C2 code" if reached
                               else "no live C2 compilation reaches the recorder's calls (interpreter or C1 only)"))


if __name__ == "__main__":
    main()
