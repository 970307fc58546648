#!/usr/bin/env python3
"""The issue-#38 table: symmem4j's all-reduce (GpuAllReduceBench's policy column) against the best anchor of the same
call (bench/gpu/torch_anchors.py: torch symmetric-memory one-/two-shot and NCCL through torch.distributed), per dtype
and mode, the median over several runs of ours, and optionally a base build's runs beside it.

    anchor_ratio.py --anchors torch-anchors.csv --ours this-1.md,this-2.md [--base base-1.md,base-2.md]

Prints markdown: size | best anchor (µs, which) | ours median (each run) | ours / best | base median | base / best.
"""
import argparse
import csv
import re
import statistics


def policy_times(path):
    """{((dtype, mode), bytes): policy µs} from one GpuAllReduceBench markdown report."""
    times, section = {}, None
    for line in open(path):
        m = re.match(r'## (BFLOAT16|FLOAT32), (graph-captured|eager)', line)
        if m:
            section = ('bf16' if m.group(1) == 'BFLOAT16' else 'fp32', 'graph' if 'graph' in m.group(2) else 'eager')
            continue
        if section and line.startswith('| ') and re.match(r'\| \d+ (KiB|MiB) \|', line):
            cells = [c.strip() for c in line.strip().strip('|').split('|')]
            n, unit = cells[0].split()
            times[(section, int(n) * (1024 if unit == 'KiB' else 1 << 20))] = float(cells[-2])
    return times


def best_anchors(path):
    """{((dtype, mode), bytes): (µs, variant)}: the fastest anchor of each cell."""
    best = {}
    for row in csv.DictReader(open(path)):
        if row['what'] != 'allreduce':
            continue
        key = ((row['dtype'], row['mode']), int(row['bytes_or_m']))
        us = float(row['us'])
        if key not in best or us < best[key][0]:
            best[key] = (us, row['variant'])
    return best


def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--anchors', required=True)
    p.add_argument('--ours', required=True, help='comma-separated GpuAllReduceBench reports of this build')
    p.add_argument('--base', default='', help='comma-separated reports of a base build (same call)')
    a = p.parse_args()
    ours = [policy_times(f) for f in a.ours.split(',')]
    base = [policy_times(f) for f in a.base.split(',') if f]
    anchors = best_anchors(a.anchors)
    for section in [('bf16', 'graph'), ('fp32', 'graph'), ('bf16', 'eager'), ('fp32', 'eager')]:
        sizes = sorted({k[1] for run in ours for k in run if k[0] == section})
        if not sizes:
            continue
        print(f"\n### {section[0]}, {section[1]}\n")
        print("| size | best anchor µs | ours µs, median (runs) | ours / best |" + (" base µs | base / best |" if base else ""))
        print("|---|---:|---:|---:|" + ("---:|---:|" if base else ""))
        for b in sizes:
            runs = [r[(section, b)] for r in ours if (section, b) in r]
            med = statistics.median(runs)
            us, variant = anchors.get((section, b), (float('nan'), '-'))
            line = f"| {size(b)} | {us:.2f} ({variant}) | {med:.2f} ({', '.join(f'{v:.2f}' for v in runs)}) | {med / us:.2f} |"
            if base:
                runs_b = [r[(section, b)] for r in base if (section, b) in r]
                med_b = statistics.median(runs_b) if runs_b else float('nan')
                line += f" {med_b:.2f} | {med_b / us:.2f} |"
            print(line)


if __name__ == '__main__':
    main()
