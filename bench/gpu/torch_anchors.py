#!/usr/bin/env python3
"""PyTorch's anchors for the GPU benchmarks, measured in the same device call as ours (issue #38).

Run with one process per GPU:
    python -m torch.distributed.run --standalone --nproc_per_node=N bench/gpu/torch_anchors.py \
        --what allreduce,tp --out anchors.csv

allreduce: for bf16 and fp32, sizes 1 KiB .. 256 MiB, in-place SUM:
    torch_one_shot   torch.ops.symm_mem.one_shot_all_reduce (out of place into a fresh tensor; the input in
                     symmetric memory)
    torch_two_shot   torch.ops.symm_mem.two_shot_all_reduce_ (in place, symmetric memory)
    nccl             dist.all_reduce on a plain tensor (NCCL, NVLS off)
  each graph-captured (50 calls in one CUDA graph, replayed; CUDA events) and eager (50 back-to-back calls).
tp: at M in --rows, (N, K) in --shapes, bf16:
    all-gather + matmul:  A shard (M/world x K), B (K x N) -> C (M x N)
        torch_fused  torch.ops.symm_mem.fused_all_gather_matmul
        nccl_cublas  dist.all_gather_into_tensor then torch.matmul
        cublas       torch.matmul on the gathered A alone (no communication)
    matmul + reduce-scatter: A (M x N), B (N x K) -> (M/world x K)
        torch_fused  torch.ops.symm_mem.fused_matmul_reduce_scatter
        nccl_cublas  torch.matmul then dist.reduce_scatter_tensor
        cublas       torch.matmul alone
  eager, as TensorParallelGemmBench times them: 3 warm-up calls, then --reps timings of --iters calls.

fsdp: the MLP block's training step (tokens per rank x hidden x ffn in --fsdp-shapes, --blocks blocks: Linear(h, f),
  ReLU, Linear(f, h), ReLU between blocks, no bias), data parallel over the ranks, PyTorch FSDP2: fully_shard on every
  Linear, then on the model, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16), float32 parameters,
  torch.optim.Adam(lr=--lr, betas (0.9, 0.999), eps 1e-8), loss y.backward(dy) -- what FsdpMlpBench runs. Rows go to
  --fsdp-out (columns: what,tokens,hidden,ffn,layers,variant,step_ms,spread,peak_allocated_bytes,peak_reserved_bytes,
  device_used_bytes,world,device,torch): step time by CUDA events over --fsdp-steps steps after --fsdp-warmup, median of
  --reps timings, slowest rank; memory per rank (largest over the ranks): torch.cuda.max_memory_allocated and
  max_memory_reserved above what was allocated before the model, and the device's used bytes (torch.cuda.mem_get_info:
  free before the model minus the least free seen after set-up and after the steps).

Every cell's time is the largest over the ranks of their medians (the slowest rank bounds a collective).
Rank 0 writes the CSV: what,op,dtype,bytes_or_m,n,k,variant,mode,us,world,device,torch.
NVLink multicast stays off (TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NCCL_NVLS_ENABLE=0 are set before import).
"""
import argparse
import os
import statistics
import sys

os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._symmetric_memory as symm_mem  # noqa: E402


def sizes(lo, hi):
    s = lo
    while s <= hi:
        yield s
        s *= 4


def time_calls(fn, reps, iters, graph):
    """Median microseconds per call of `iters` calls of fn, over `reps` timings."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            with torch.cuda.graph(g, stream=s):
                for _ in range(iters):
                    fn()
        torch.cuda.current_stream().wait_stream(s)
        g.replay()
        torch.cuda.synchronize()
        run = g.replay
    else:
        def run():
            for _ in range(iters):
                fn()
    dist.barrier()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / iters)
    med = statistics.median(times)
    worst = torch.tensor([med], device="cuda", dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return worst.item()


def allreduce_cells(args, group_name, rows, world, device_name):
    for dtype, dname in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        elt = torch.tensor([], dtype=dtype).element_size()
        for nbytes in sizes(args.min_bytes, args.max_bytes):
            count = nbytes // elt
            symm = symm_mem.empty(count, dtype=dtype, device="cuda")
            symm_mem.rendezvous(symm, group_name)
            symm.uniform_(-1, 1)
            plain = torch.empty(count, dtype=dtype, device="cuda").uniform_(-1, 1)
            variants = {
                "torch_one_shot": lambda: torch.ops.symm_mem.one_shot_all_reduce(symm, "sum", group_name),
                "torch_two_shot": lambda: torch.ops.symm_mem.two_shot_all_reduce_(symm, "sum", group_name),
                "nccl": lambda: dist.all_reduce(plain),
            }
            for variant, fn in variants.items():
                for graph in (True, False):
                    mode = "graph" if graph else "eager"
                    try:
                        # sums of random values grow; the values do not matter to the time, but keep them finite
                        symm.uniform_(-1, 1)
                        plain.uniform_(-1, 1)
                        us = time_calls(fn, args.reps, args.iters, graph)
                    except Exception as e:  # an op missing or refusing at this size: say so, go on
                        if dist.get_rank() == 0:
                            print(f"allreduce {dname} {nbytes} {variant} {mode}: {type(e).__name__}: {e}".splitlines()[0],
                                  file=sys.stderr)
                        us = float("nan")
                    rows.append(("allreduce", "all_reduce", dname, nbytes, "", "", variant, mode, us, world, device_name))
                    if dist.get_rank() == 0:
                        print(f"allreduce {dname} {nbytes:>10} {variant:<15} {mode:<5} {us:9.2f} us", file=sys.stderr)
            del symm, plain
            torch.cuda.empty_cache()


def tp_cells(args, group_name, rows, world, device_name):
    dtype = torch.bfloat16
    for shape in args.shapes.split(","):
        n, k = (int(x) for x in shape.split("x"))
        for m in (int(x) for x in args.rows.split(",")):
            a_shard = torch.empty(m // world, k, dtype=dtype, device="cuda").uniform_(-1, 1)
            a_full = torch.empty(m, k, dtype=dtype, device="cuda").uniform_(-1, 1)
            b = torch.empty(k, n, dtype=dtype, device="cuda").uniform_(-1, 1)
            ag = {
                "torch_fused": lambda: torch.ops.symm_mem.fused_all_gather_matmul(a_shard, [b], 0, group_name),
                "nccl_cublas": lambda: torch.matmul(gather(a_shard, a_full), b),
                "cublas": lambda: torch.matmul(a_full, b),
            }
            a_rs = torch.empty(m, n, dtype=dtype, device="cuda").uniform_(-1, 1)
            b_rs = torch.empty(n, k, dtype=dtype, device="cuda").uniform_(-1, 1)
            out_rs = torch.empty(m // world, k, dtype=dtype, device="cuda")
            rs = {
                "torch_fused": lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a_rs, b_rs, "sum", 0, group_name),
                "nccl_cublas": lambda: dist.reduce_scatter_tensor(out_rs, torch.matmul(a_rs, b_rs)),
                "cublas": lambda: torch.matmul(a_rs, b_rs),
            }
            for op, variants in (("all-gather + matmul", ag), ("matmul + reduce-scatter", rs)):
                for variant, fn in variants.items():
                    try:
                        us = time_calls(fn, args.reps, args.tp_iters, False)
                    except Exception as e:
                        if dist.get_rank() == 0:
                            print(f"tp {op} {m} {n} {k} {variant}: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
                        us = float("nan")
                    rows.append(("tp", op, "bf16", m, n, k, variant, "eager", us, world, device_name))
                    if dist.get_rank() == 0:
                        print(f"tp {op:<24} M={m} N={n} K={k} {variant:<12} {us:9.1f} us", file=sys.stderr)
            del a_shard, a_full, b, a_rs, b_rs, out_rs
            torch.cuda.empty_cache()


def fsdp_cells(args, world, device_name):
    """The FSDP2 step of the MLP block at each shape; the rows for --fsdp-out (rank 0 writes them)."""
    from torch import nn
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    rows = []
    for shape in args.fsdp_shapes.split(","):
        t, h, f = (int(x) for x in shape.lower().split("x"))
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        dist.barrier()
        base = torch.cuda.memory_allocated()
        free0 = torch.cuda.mem_get_info()[0]
        layers = []
        for b in range(args.blocks):
            if b > 0:
                layers.append(nn.ReLU())
            layers += [nn.Linear(h, f, bias=False), nn.ReLU(), nn.Linear(f, h, bias=False)]
        model = nn.Sequential(*layers)
        # the same initial scale as FsdpMlpBench (uniform in +-1/sqrt(in)); initialized on the GPU, then sharded
        model = model.cuda()
        with torch.no_grad():
            for m in model:
                if isinstance(m, nn.Linear):
                    m.weight.uniform_(-1 / m.in_features ** 0.5, 1 / m.in_features ** 0.5)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
        for m in model:
            if isinstance(m, nn.Linear):
                fully_shard(m, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        # the whole model existed on every GPU before fully_shard cut it: give that memory back and start the peak here,
        # so that the peak is the sharded training's (the model's shards stay allocated, above base)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
        gen = torch.Generator(device="cuda").manual_seed(7000 + dist.get_rank())
        x = (torch.rand(t, h, device="cuda", generator=gen, dtype=torch.float32) * 2 - 1).to(torch.bfloat16)
        dy = ((torch.rand(t, h, device="cuda", generator=gen, dtype=torch.float32) * 2 - 1) * 0.01).to(torch.bfloat16)
        least_free = torch.cuda.mem_get_info()[0]

        def step():
            y = model(x)
            y.backward(dy)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return y

        y = None
        for _ in range(1 + args.fsdp_warmup):
            y = step()
        torch.cuda.synchronize()
        least_free = min(least_free, torch.cuda.mem_get_info()[0])
        finite = bool(torch.isfinite(y.float()).all().item())
        dist.barrier()
        times = []
        for _ in range(args.reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.fsdp_steps):
                step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / args.fsdp_steps)
        torch.cuda.synchronize()
        least_free = min(least_free, torch.cuda.mem_get_info()[0])
        med = statistics.median(times)
        stats = torch.tensor([med, -med, float(torch.cuda.max_memory_allocated() - base),
                              float(torch.cuda.max_memory_reserved()), float(free0 - least_free), 0.0 if finite else 1.0],
                             device="cuda", dtype=torch.float64)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
        slowest, fastest = stats[0].item(), -stats[1].item()
        rows.append(("fsdp", t, h, f, 2 * args.blocks, "torch_fsdp2", f"{slowest:.3f}", f"{slowest / fastest - 1:.4f}",
                     int(stats[2].item()), int(stats[3].item()), int(stats[4].item()), world, device_name))
        if dist.get_rank() == 0:
            print(f"fsdp {shape} blocks={args.blocks} torch_fsdp2 {slowest:8.2f} ms/step, peak allocated "
                  f"{stats[2].item() / 2**30:.2f} GiB, reserved {stats[3].item() / 2**30:.2f} GiB, device used "
                  f"{stats[4].item() / 2**30:.2f} GiB{'' if stats[5].item() == 0 else ', OUTPUT NOT FINITE'}", file=sys.stderr)
        del model, opt, x, dy, y
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return rows


def gather(shard, full):
    dist.all_gather_into_tensor(full, shard)
    return full


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--what", default="allreduce,tp")
    p.add_argument("--out", default="torch-anchors.csv")
    p.add_argument("--min-bytes", type=int, default=1024)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--tp-iters", type=int, default=5)
    p.add_argument("--shapes", default="1792x4096,3584x8192")
    p.add_argument("--rows", default="4096,8192,16384", help="M values (named so: torchrun takes --m for its own options)")
    p.add_argument("--fsdp-shapes", default="8192x4096x14336,16384x4096x14336,8192x8192x28672,16384x8192x28672",
                   help="tokens per rank x hidden x ffn of the fsdp cells")
    p.add_argument("--blocks", type=int, default=1, help="MLP blocks stacked in the fsdp cells")
    p.add_argument("--fsdp-warmup", type=int, default=3)
    p.add_argument("--fsdp-steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--fsdp-out", default="torch-fsdp.csv")
    args = p.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    group_name = dist.group.WORLD.group_name
    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if enable is not None:
        enable(group_name)
    world = dist.get_world_size()
    device_name = torch.cuda.get_device_name(local)
    rows = []
    what = args.what.split(",")
    if "allreduce" in what:
        allreduce_cells(args, group_name, rows, world, device_name)
    if "tp" in what:
        tp_cells(args, group_name, rows, world, device_name)
    if "fsdp" in what:
        fsdp_rows = fsdp_cells(args, world, device_name)
        if dist.get_rank() == 0:
            with open(args.fsdp_out, "w") as f:
                f.write("what,tokens,hidden,ffn,layers,variant,step_ms,spread,peak_allocated_bytes,peak_reserved_bytes,"
                        "device_used_bytes,world,device,torch\n")
                for r in fsdp_rows:
                    f.write(",".join(str(x) for x in r) + f",{torch.__version__}\n")
            print(f"wrote {args.fsdp_out}: {len(fsdp_rows)} cells", file=sys.stderr)
    if dist.get_rank() == 0 and rows:
        with open(args.out, "w") as f:
            f.write("what,op,dtype,bytes_or_m,n,k,variant,mode,us,world,device,torch\n")
            for r in rows:
                f.write(",".join(str(x) for x in r) + f",{torch.__version__}\n")
        print(f"wrote {args.out}: {len(rows)} cells, torch {torch.__version__}", file=sys.stderr)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
