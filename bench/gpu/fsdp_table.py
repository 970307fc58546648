#!/usr/bin/env python3
"""The fully sharded MLP step's results table (issue #31): our FsdpMlpBench rows (fsdp-ours-<N>gpus.csv: variants fsdp
and ddp) joined with PyTorch FSDP2's (fsdp-torch-<N>gpus.csv, bench/gpu/torch_anchors.py --what fsdp) on GPUs, tokens,
hidden, ffn and layers. Prints a markdown table (and writes it as CSV to --csv): step time of ours (sharded) and of
FSDP2 and their ratio (target <= 1.0), ours replicated (DDP-style), ours sharded with layer 0's tail whole (variant
fsdp-whole, where run: the schedule before the tail blocks), and per rank the device's used memory (cuMemGetInfo /
torch.cuda.mem_get_info: free before the model minus the least free after) of both and its ratio, our peak allocation
(exact: ShardedStepMemory's buffers) and FSDP2's torch.cuda.max_memory_allocated above its start and their ratio (the
memory target, <= 1.0), and the part of our used memory that
is the runtime's whatever the model (two communicators with NCCL, cuBLAS workspaces: FSDP2's NCCL communicator was made
before its start and is not in its column).

    fsdp_table.py [--csv table.csv] FILE.csv ...   (either kind of file, any order)
"""
import argparse
import csv
import sys

GIB = float(1 << 30)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv")
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    ours, torch = {}, {}
    for name in args.files:
        try:
            with open(name, newline="") as f:
                for row in csv.DictReader(f):
                    if "gpus" in row:  # ours
                        key = (int(row["gpus"]), int(row["tokens"]), int(row["hidden"]), int(row["ffn"]), int(row["layers"]))
                        ours.setdefault(key, {})[row["variant"]] = row
                    elif row.get("variant") == "torch_fsdp2":
                        key = (int(row["world"]), int(row["tokens"]), int(row["hidden"]), int(row["ffn"]), int(row["layers"]))
                        torch[key] = row
        except FileNotFoundError:
            print(f"fsdp_table: {name} missing (that run failed or was skipped)", file=sys.stderr)
    keys = sorted(set(ours) | set(torch))
    if not keys:
        print("fsdp_table: no rows", file=sys.stderr)
        return 1
    header = ["gpus", "tokens x hidden x ffn", "layers", "ours fsdp ms", "FSDP2 ms", "time ours/FSDP2", "ours ddp ms",
              "ours fsdp-whole ms",
              "ours fsdp used GiB", "FSDP2 used GiB", "mem ours/FSDP2", "ours accounted GiB", "FSDP2 peak alloc GiB",
              "acc ours/FSDP2",
              "ours ddp used GiB", "ours runtime GiB", "check"]
    out = []
    for k in keys:
        o = ours.get(k, {})
        f, d, t = o.get("fsdp"), o.get("ddp"), torch.get(k)

        def num(row, col, scale=1.0):
            return float(row[col]) / scale if row and row.get(col) not in (None, "") else None

        of, tf = num(f, "step_ms"), num(t, "step_ms")
        ou, tu = num(f, "device_used_bytes", GIB), num(t, "device_used_bytes", GIB)
        oa, ta = num(f, "accounted_bytes", GIB), num(t, "peak_allocated_bytes", GIB)
        checks = ";".join(sorted({r["check"] for r in (f, d, o.get("fsdp-whole")) if r}))
        out.append([k[0], f"{k[1]}x{k[2]}x{k[3]}", k[4], of, tf, of / tf if of and tf else None, num(d, "step_ms"),
                    num(o.get("fsdp-whole"), "step_ms"), ou, tu,
                    ou / tu if ou and tu else None, oa, ta, oa / ta if oa and ta else None,
                    num(d, "device_used_bytes", GIB), num(f or d, "runtime_bytes", GIB), checks])

    def fmt(v):
        return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))

    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in out:
        print("| " + " | ".join(fmt(v) for v in r) + " |")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            for r in out:
                w.writerow(["" if v is None else v for v in r])
    return 0


if __name__ == "__main__":
    sys.exit(main())
