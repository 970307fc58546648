#!/usr/bin/env python3
"""The anchor of symmem4j's restart soak (issue 32): torchrun's own restart, on CPU.

The same experiment as bench/restart-soak.sh (examples' RestartSoak), with PyTorch: T trials of a 2-process job
started by `python -m torch.distributed.run --standalone --nproc-per-node 2 --max-restarts N` (gloo, CPU), a small
MLP (64-32-32-10, Adam, as symmem4j's RestartingTraining) trained with DistributedDataParallel, 2 epochs of 12 steps
of 16 examples per rank, a checkpoint every K steps (rank 0 writes it: a temporary file, fsync, rename, and a
manifest with the file's SHA-256 written last; a checkpoint without a matching manifest is torn and skipped), and a
kill -9 of a random rank after a random step of the first generation. Before the trials one uninterrupted run gives
the reference. Per trial it records the time from the kill to the restarted generation's first step, the step
resumed from and the steps redone, hangs (torchrun not back within the watchdog: its process group is killed), torn
checkpoints skipped, corrupt ones loaded, bitwise equality of the final model and optimizer state with the
reference's, and residue (processes of the job left after torchrun exited).

    python torchrun_restart.py [--trials 100] [--seed 1] [--every 4] [--max-restarts 1] [--watchdog 120]
                               [--csv FILE] [--work DIR]

prints the CSV (one row per trial) on stdout and a summary on stderr. Only the standard library and torch (2.x; the
API of 2.11); `worker` is the mode torchrun runs. Self-contained: copy it anywhere.
"""
import argparse
import hashlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

STEPS_PER_EPOCH = 12
EPOCHS = 2
PER_RANK_BATCH = 16
FEATURES, HIDDEN, CLASSES = 64, 32, 10
MANIFEST = "manifest.txt"
CKPT = "ckpt.pt"


def now_ms():
    return int(time.time() * 1000)


# ----------------------------------------------------------------------------------------------------- worker

def step_dir(root, step):
    return os.path.join(root, "step-%012d" % step)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path, write):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(root, step, state, torch):
    d = step_dir(root, step)
    os.makedirs(d, exist_ok=True)
    manifest = os.path.join(d, MANIFEST)
    if os.path.exists(manifest):  # torn from here until the new manifest is written
        os.remove(manifest)
    write_atomically(os.path.join(d, CKPT), lambda f: torch.save(state, f))
    fsync_dir(d)
    digest = sha256_of(os.path.join(d, CKPT))
    write_atomically(manifest, lambda f: f.write(("step=%d\n%s=%s\n" % (step, CKPT, digest)).encode()))
    fsync_dir(d)


def verify(d):
    """The step of a complete checkpoint directory; raises ValueError naming what is torn."""
    manifest = os.path.join(d, MANIFEST)
    if not os.path.isfile(manifest):
        raise ValueError("torn: %s missing" % MANIFEST)
    fields = dict(line.split("=", 1) for line in open(manifest).read().split("\n") if "=" in line)
    ckpt = os.path.join(d, CKPT)
    if not os.path.isfile(ckpt) or sha256_of(ckpt) != fields.get(CKPT):
        raise ValueError("torn: %s does not match its manifest" % CKPT)
    return int(fields["step"])


def latest_complete(root, say):
    if not os.path.isdir(root):
        return None
    for name in sorted((n for n in os.listdir(root) if re.fullmatch(r"step-\d{12}", n)), reverse=True):
        d = os.path.join(root, name)
        try:
            return d, verify(d)
        except (ValueError, OSError, KeyError) as e:
            if say:
                print("SKIPPED torn checkpoint %s: %s" % (d, e), flush=True)
    return None


def tensor_digest(torch, obj, h):
    """Feeds the exact bits of every tensor in a (nested) state dict to h, in key order."""
    if isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(str(k).encode())
            tensor_digest(torch, obj[k], h)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            tensor_digest(torch, v, h)
    elif torch.is_tensor(obj):
        t = obj.detach().contiguous().flatten()
        if t.dtype == torch.float32:
            t = t.view(torch.int32)
        elif t.dtype == torch.float64:
            t = t.view(torch.int64)
        h.update(str(t.dtype).encode())
        h.update(repr(t.tolist()).encode())
    else:
        h.update(repr(obj).encode())


def worker(a):
    started = now_ms()
    rank = int(os.environ["RANK"])
    gen = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    print("START rank %d generation %d pid %d at %d ms" % (rank, gen, os.getpid(), started), flush=True)
    faults = []
    for f in a.fault or []:
        m = re.fullmatch(r"kill@g(\d+)r(\d+)s(\d+)", f)
        if not m:
            raise SystemExit("fault %r: expected kill@g<G>r<R>s<S>" % f)
        faults.append(tuple(int(x) for x in m.groups()))

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group(backend="gloo")  # torchrun's env:// rendezvous
    world = dist.get_world_size()
    grouped = now_ms()

    gen_data = torch.Generator().manual_seed(1)
    teacher = torch.randn(CLASSES, FEATURES, generator=gen_data)
    xs = torch.randn(STEPS_PER_EPOCH, world * PER_RANK_BATCH, FEATURES, generator=gen_data)
    ys = (xs @ teacher.T).argmax(dim=-1)

    torch.manual_seed(12345)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                                torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))
    progress = -1
    if rank == 0:
        try:
            progress = int(open(os.path.join(a.root, "progress")).read().strip())
        except (OSError, ValueError):
            progress = -1
    found = latest_complete(a.root, rank == 0)
    os.makedirs(a.root, exist_ok=True)
    state = None
    start = 0
    if found is not None:
        state = torch.load(os.path.join(found[0], CKPT), weights_only=True)
        model.load_state_dict(state["model"])
        start = state["step"]
    ddp = DDP(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    if state is not None:
        opt.load_state_dict(state["optim"])
        print("RESUMED generation %d from step %d; main at %d ms, group at %d ms, restored at %d ms"
              % (gen, start, started, grouped, now_ms()), flush=True)
    if rank == 0 and gen > 0:
        print("REDONE generation %d: progress %d, resumed from step %d, %d steps redone"
              % (gen, progress, start, max(0, progress - start)), flush=True)

    total = EPOCHS * STEPS_PER_EPOCH
    first = True
    for step in range(start, total):
        b = step % STEPS_PER_EPOCH
        lo, hi = rank * PER_RANK_BATCH, (rank + 1) * PER_RANK_BATCH
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(xs[b, lo:hi]), ys[b, lo:hi])
        loss.backward()  # DDP all-reduces (averages) the gradients over gloo
        opt.step()
        done = step + 1
        if first:
            first = False
            print("FIRST STEP %d of generation %d at %d ms" % (done, gen, now_ms()), flush=True)
        for (g, r, s) in faults:
            if g == gen and r == rank and s == done:
                print("KILL rank %d generation %d after step %d at %d ms" % (rank, gen, done, now_ms()), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        if rank == 0:
            with open(os.path.join(a.root, "progress.tmp"), "w") as f:  # informs only: not forced, as symmem4j's
                f.write("%d\n" % done)
            os.replace(os.path.join(a.root, "progress.tmp"), os.path.join(a.root, "progress"))
            if done % a.every == 0:
                save_checkpoint(a.root, done, {"step": done, "model": model.state_dict(),
                                               "optim": opt.state_dict()}, torch)
    if rank == 0:
        h = hashlib.sha256()
        tensor_digest(torch, {"model": model.state_dict(), "optim": opt.state_dict()}, h)
        print("DONE generation %d, %d steps, final sha256 %s" % (gen, total, h.hexdigest()), flush=True)
    dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------------- driver

def run_job(a, trial_dir, faults):
    """Runs torchrun once; returns (exit code or None when it hung, output, residue count, wall seconds)."""
    os.makedirs(trial_dir, exist_ok=True)
    cmd = [a.python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=2",
           "--max-restarts=%d" % a.max_restarts, "--monitor-interval=%s" % a.monitor_interval,
           os.path.abspath(__file__), "worker", "--root", os.path.join(trial_dir, "checkpoints"),
           "--every", str(a.every)]
    for f in faults:
        cmd += ["--fault", f]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: loopback, also where the host name does not resolve
    # torchrun shares its rendezvous TCPStore with the workers' init_process_group by default (since torch 2.5), and a
    # restarted generation can then read the previous generation's gloo/NCCL addresses and fail to connect
    # (pytorch/pytorch#135712, #167288: "Connection refused" in connectFullMesh, seen here with torch 2.11). Its own
    # workaround, a separate store per generation, is torchrun's working configuration for restarts.
    env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                         text=True)
    try:
        out, _ = p.communicate(timeout=a.watchdog)
        code = p.returncode
    except subprocess.TimeoutExpired:
        kill_all(trial_dir)
        out, _ = p.communicate()
        code = None
    wall = time.time() - t0
    residue = 0
    if code is not None:
        time.sleep(0.2)
        residue = len(processes_of(trial_dir))
    kill_all(trial_dir)  # whatever is left
    return code, out, residue, wall


def processes_of(trial_dir):
    """Live processes whose command line names the trial's directory: torchrun and its workers (whatever their
    process group or session)."""
    left = []
    token = trial_dir.encode()
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                if token not in open("/proc/%s/cmdline" % pid, "rb").read():
                    continue
                state = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                left.append(int(pid))
    return left


def kill_all(trial_dir):
    for pid in processes_of(trial_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def first_int(pattern, text, group=1, default=-1):
    m = re.search(pattern, text)
    return int(m.group(group)) if m else default


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode")
    w = sub.add_parser("worker", help="one rank of the job (torchrun runs it)")
    w.add_argument("--root", required=True)
    w.add_argument("--every", type=int, default=4)
    w.add_argument("--fault", action="append")
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--every", type=int, default=4, help="a checkpoint every K steps")
    p.add_argument("--max-restarts", type=int, default=1)
    p.add_argument("--monitor-interval", default="0.1", help="torchrun's --monitor-interval (seconds)")
    p.add_argument("--watchdog", type=float, default=120.0, help="a trial that runs longer is a hang")
    p.add_argument("--minutes", type=float, default=0, help="no trial starts after this long (0: no limit)")
    p.add_argument("--csv", help="also write the CSV here")
    p.add_argument("--work", help="trial directories (default: a fresh temporary directory)")
    p.add_argument("--python", default=sys.executable, help="the Python that has torch")
    a = p.parse_args()
    if a.mode == "worker":
        worker(a)
        return 0
    if a.every < 1 or a.trials < 0:
        p.error("--every must be >= 1 and --trials >= 0")

    import random
    work = a.work or tempfile.mkdtemp(prefix="torchrun-restart-")
    began = time.time()
    code, out, residue, ref_wall = run_job(a, os.path.join(work, "reference"), [])
    ref = re.search(r"final sha256 ([0-9a-f]{64})", out)
    if code != 0 or not ref:
        sys.stderr.write(out)
        sys.stderr.write("the uninterrupted reference run failed (exit %s)\n" % code)
        return 1
    sys.stderr.write("reference run: %.1f s, final sha256 %s, residue %d\n" % (ref_wall, ref.group(1), residue))
    try:
        import torch
        version = torch.__version__
    except ImportError:
        version = "unknown"
    header = ("trial,rank,kill_step,status,resumed_from,expected_from,redone_logged,redone,kill_to_first_step_s,"
              "hang,torn_skipped,corrupt,equal,residue,wall_s")
    rows = [header]
    print(header, flush=True)
    total = EPOCHS * STEPS_PER_EPOCH
    for t in range(a.trials):
        if a.minutes and time.time() - began > a.minutes * 60:
            sys.stderr.write("time budget spent after %d trials\n" % t)
            break
        rnd = random.Random(a.seed * 1000003 + t)
        rank = rnd.randrange(2)
        step = 1 + rnd.randrange(total - 1)
        trial_dir = os.path.join(work, "trial-%d" % t)
        code, out, residue, wall = run_job(a, trial_dir, ["kill@g0r%ds%d" % (rank, step)])
        kill_at = first_int(r"KILL rank \d generation 0 after step \d+ at (\d+) ms", out)
        firsts = [int(m.group(1)) for m in re.finditer(r"FIRST STEP \d+ of generation 1 at (\d+) ms", out)]
        resumed = first_int(r"RESUMED generation 1 from step (\d+)", out, default=0)
        redone_logged = first_int(r"REDONE generation 1: progress -?\d+, resumed from step \d+, (\d+) steps", out)
        # rank 0 writes checkpoints alone: after a kill of rank 1 after a checkpoint's step it may still complete
        # that one (it had the step's all-reduce); a kill of rank 0 there leaves the one before
        expected = (step - 1) // a.every * a.every
        newest_valid = step // a.every * a.every
        final = re.search(r"DONE generation \d+, \d+ steps, final sha256 ([0-9a-f]{64})", out)
        equal = bool(final) and final.group(1) == ref.group(1)
        hang = code is None
        corrupt = (resumed > newest_valid) or (code == 0 and not equal)
        k2f = (min(firsts) - kill_at) / 1000.0 if kill_at >= 0 and firsts else float("nan")
        row = "%d,%d,%d,%s,%d,%d,%d,%d,%.3f,%d,%d,%d,%d,%d,%.1f" % (
            t, rank, step, "-1" if hang else code, resumed, expected, redone_logged, step - resumed, k2f, int(hang),
            len(re.findall(r"SKIPPED torn checkpoint", out)), int(corrupt), int(equal), residue, wall)
        rows.append(row)
        print(row, flush=True)
        if code != 0 or not equal:
            sys.stderr.write("trial %d: exit %s, equal %s; its output:\n%s\n" % (t, code, equal, out[-4000:]))
        shutil.rmtree(trial_dir, ignore_errors=True)
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("\n".join(rows) + "\n")
    data = [r.split(",") for r in rows[1:]]
    times = sorted(float(r[8]) for r in data if r[9] == "0" and r[8] != "nan")

    def pct(q):
        return "%.2f" % times[min(len(times) - 1, max(0, math.ceil(q * len(times)) - 1))] if times else "-"

    sys.stderr.write(
        "torch %s, %d CPUs, %d trials, seed %d, --every %d, --max-restarts %d, --monitor-interval %s\n"
        "kill -9 -> first step of generation 1: min %s, median %s, p90 %s, max %s s; within 10 s: %d of %d\n"
        "max steps redone %s; hangs %d; exit not 0 %d; corrupt %d; not equal %d; residue %d; reference run %.1f s\n" % (
            version, os.cpu_count(), len(data), a.seed, a.every, a.max_restarts, a.monitor_interval,
            pct(0), pct(0.5), pct(0.9), pct(1.0), sum(1 for x in times if x <= 10.0), len(times),
            max((int(r[7]) for r in data if r[9] == "0"), default=-1), sum(r[9] == "1" for r in data),
            sum(r[3] not in ("0", "-1") for r in data), sum(r[11] == "1" for r in data),
            sum(r[12] == "0" and r[9] == "0" for r in data), sum(int(r[13]) > 0 for r in data), ref_wall))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
