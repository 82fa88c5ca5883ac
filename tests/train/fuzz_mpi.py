#!/usr/bin/env python3
"""Randomized check of `mpirun -np N spill train` against one process.

usage: O=build/release python3 tests/train/fuzz_mpi.py [COUNT] [SEED] [WORKDIR]

Each configuration (schedule x devices per node x N x batch x budget x bf16 x
update-on-cpu x recompute x grad-clip x SPILL_HOST_JITTER) runs as
  A: mpirun -np N spill train --devices d ...
  B: spill train --devices N*d ...           (the contract's reference)
and, when A and B's plans differ in replicas or microbatch (pipelines: a node
is one replica), also
  C: spill train --devices R --schedule dp-swap --microbatch m ...
where R is A's total replicas and m its microbatch (the reference loop's
bits: replicas summed in rank order, each replica's microbatches in order).
Compares the --stats-json losses and the final checkpoint bytes. A run that
must fail (a batch N does not divide) must print one line and exit non-zero
on every node, within the timeout. Prints one line per configuration and a
summary; exits 1 on any failure. Outputs stay in WORKDIR/<tag>{a,b,c}.out.
Environment: TIGHT (share of configurations at a node's smallest budget +10%,
0.3), ZERO1 (share of the mpirun runs with --zero1, 0), JITTER (share under SPILL_HOST_JITTER, 0.5), WINDOWS (share with a
random SPILL_WINDOW, 0.3), PIPE_ONLY=1 (pipeline schedules, 2-4 devices per
node, 6 steps), RANK_JITTER=1 (every node its own jitter seed, node r up to
(r+1) x the delay). "diff-plan": A's plan has other replicas or microbatch
than B's, and A equals C. "FAIL-NOISY": A failed as one node's share fails
alone too, but with more than one line.
"""
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

O = os.environ.get("O", "build/release")
SPILL = os.path.abspath(os.path.join(O, "bin", "spill"))
COUNT = int(sys.argv[1]) if len(sys.argv) > 1 else 20
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else 1
WORK = sys.argv[3] if len(sys.argv) > 3 else "/tmp/fuzz_mpi"
TIMEOUT = 120
TIGHT = float(os.environ.get("TIGHT", "0.3"))
ZERO1 = float(os.environ.get("ZERO1", "0"))  # share of A runs with --zero1
JITTER = float(os.environ.get("JITTER", "0.5"))
WINDOWS = float(os.environ.get("WINDOWS", "0.3"))
PIPE_ONLY = os.environ.get("PIPE_ONLY") == "1"
RANK_JITTER = os.environ.get("RANK_JITTER") == "1"
SCHEDS = ["dp-swap", "harmony-dp", "gpipe", "1f1b", "harmony-pp", "interleaved"]
PIPE = {"gpipe", "1f1b", "harmony-pp", "interleaved"}

env = dict(os.environ, SPILL_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPI = ["mpirun", "--oversubscribe", "--bind-to", "none"]


def corpus():
    os.makedirs(WORK, exist_ok=True)
    data = os.path.join(WORK, "data")
    if os.path.isdir(data):
        return data
    rnd = random.Random(2)
    words = ("in the beginning god created heaven and earth was without form "
             "void darkness").split()
    with open(os.path.join(WORK, "text.txt"), "w") as f:
        for _ in range(900):
            f.write(" ".join(rnd.choice(words) for _ in range(9)) + ".\n")
    subprocess.run([SPILL, "prepare", os.path.join(WORK, "text.txt"), "-o", data,
                    "--name", "t"], check=True, stdout=subprocess.DEVNULL)
    return data


EXTRA_ENV = {}


def run(name, np, devices, args, jitter):
    """-> dict(rc, out, losses, ckpt md5, plan, secs, hung)"""
    ck = os.path.join(WORK, name)
    subprocess.run(["rm", "-rf", ck, ck + ".json"])
    wrap = []
    if np and jitter and RANK_JITTER:
        # every node its own jitter sequence and size: node r sleeps up to (r+1) x US
        parts = jitter.split(":")
        us, seed = parts[1], parts[2] if len(parts) > 2 else "1"
        wrap = ["bash", "-c", 'export SPILL_HOST_JITTER="*:$(( %s * (OMPI_COMM_WORLD_RANK + 1) )):$(( %s + OMPI_COMM_WORLD_RANK ))"; exec "$@"' % (us, seed), "_"]
    cmd = ([*MPI, "-np", str(np)] if np else []) + wrap + [
        SPILL, "train", "--devices", str(devices), *args, "--checkpoint", ck,
        "--stats-json", ck + ".json"]
    e = dict(env, **EXTRA_ENV)
    if jitter:
        e["SPILL_HOST_JITTER"] = jitter
    t0 = time.time()
    p = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True, text=True)
    hung = False
    try:
        out, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(p.pid, signal.SIGKILL)  # this run's own process group
        out, _ = p.communicate()
    secs = time.time() - t0
    with open(ck + ".out", "w") as f:
        f.write(out)
    r = {"rc": p.returncode, "out": out, "secs": secs, "hung": hung, "cmd": cmd,
         "jitter": jitter, "losses": None, "md5": None, "plan": None}
    try:
        r["losses"] = json.load(open(ck + ".json"))["losses"]
    except Exception:
        pass
    steps = int(args[args.index("--steps") + 1])
    f = os.path.join(ck, "step_%08d.safetensors" % steps)
    if os.path.exists(f):
        r["md5"] = hashlib.md5(open(f, "rb").read()).hexdigest()
    m = re.search(r"^plan: (.*)$", out, re.M)
    if m:
        r["plan"] = m.group(1)
    return r


def smallest_budget(tag, d, args, nb):
    a = list(args)
    a[a.index("--batch") + 1] = str(nb)
    kb = 64
    for _ in range(4):
        r = run(tag + "t", 0, d, a + ["--budget", "%dK" % kb], None)
        if r["rc"] == 0:
            return kb
        m = re.search(r"smallest device budget [^0-9]*([0-9.]+) (KiB|MiB)", r["out"])
        if not m:
            return None
        need = float(m.group(1)) * (1024 if m.group(2) == "MiB" else 1)
        kb = max(64, int(need * 1.1) + 1)
    return None


def structure(plan, devices, sched):
    """(replicas on a node, microbatch) from a plan line"""
    mb = re.search(r"microbatch (\d+)", plan or "")
    mb = int(mb.group(1)) if mb else None
    reps = devices if sched in ("dp-swap", "harmony-dp") else 1
    return reps, mb


def shell(cmd, jitter):
    s = " ".join(cmd)
    pre = "".join("%s=%s " % kv for kv in EXTRA_ENV.items())
    return pre + ("SPILL_HOST_JITTER=%s " % jitter if jitter else "") + s


def main():
    data = corpus()
    rnd = random.Random(SEED)
    fails = 0
    summary = []
    for i in range(COUNT):
        sched = rnd.choice(SCHEDS if not PIPE_ONLY else sorted(PIPE))
        EXTRA_ENV.clear()
        if rnd.random() < WINDOWS:
            EXTRA_ENV["SPILL_WINDOW"] = str(rnd.choice([1, 2, 4]))
        N = rnd.choice([2, 3, 4])
        d = rnd.choice([1, 2, 3, 4] if not PIPE_ONLY else [2, 3, 4])
        while N * d > 8:
            d = rnd.choice([1, 2])
        C = rnd.choice([64, 64, 64, 128, 256])
        L = rnd.choice([2, 2, 4]) if PIPE_ONLY else 2
        B = N * d * rnd.choice([1, 2, 2, 3])
        bad = rnd.random() < 0.08
        if bad:
            B = N * rnd.choice([1, 2, 3]) + rnd.randint(1, N - 1)
        steps = rnd.choice([2, 3, 4]) if not PIPE_ONLY else 6
        args = ["--layers", str(L), "--channels", str(C), "--heads", "4", "--seq", "32",
                "--batch", str(B), "--data", data, "--backend", "host", "--no-tune",
                "--steps", str(steps), "--lr", "3e-3", "--warmup", "1", "--schedule", sched]
        if sched == "interleaved":
            args += ["--chunks", "2"]
        tight = rnd.random() < TIGHT
        if not tight and rnd.random() < 0.4:
            args += ["--budget", rnd.choice(["1M", "2M", "4M", "8M"])]
        if rnd.random() < 0.3:
            args += ["--precision", "bf16"]
        if rnd.random() < 0.3:
            args += ["--update-on-cpu"]
        if rnd.random() < 0.3:
            args += ["--recompute"]
        if rnd.random() < 0.3:
            args += ["--grad-clip", "0"]
        if rnd.random() < 0.3:
            args += ["--microbatch", str(rnd.choice([1, 2]))]
        jitter = ("*:%d:%d" % (rnd.choice([800, 800, 3000]), rnd.randint(1, 10**6))
                  if rnd.random() < JITTER else None)
        tag = "c%03d" % i
        if tight and not bad:
            # a node's own plan at the smallest budget it runs in (+10%)
            kb = smallest_budget(tag, d, args, B // N)
            if kb:
                args += ["--budget", "%dK" % kb]
        zero = rnd.random() < ZERO1
        a = run(tag + "a", N, d, args + (["--zero1"] if zero else []), jitter)
        desc = "%s N=%d d=%d %s%s%s %s" % (tag, N, d, "".join("%s=%s " % kv for kv in EXTRA_ENV.items()),
                                         "--zero1 " if zero else "",
                                       jitter or "", " ".join(
            x for x in args if not x.startswith("/")))
        if a["hung"]:
            fails += 1
            summary.append("HANG %s: %s" % (desc, shell(a["cmd"], jitter)))
            print(summary[-1], flush=True)
            continue
        if a["rc"] != 0:
            # must be one clear line from node 0 and no crash
            lines = [l for l in a["out"].splitlines() if l.startswith("spill")]
            crash = re.search(r"Segmentation|core dumped|signal|HANG", a["out"])
            status = "refused" if len(lines) == 1 and not crash else "FAIL-ERROR"
            if status != "refused" and not crash and not bad:
                # does one node's share fail alone too (a planner/vmm limit, not the nodes')?
                o = list(args)
                o[o.index("--batch") + 1] = str(B // N)
                one = run(tag + "o", 0, d, o, jitter)
                if one["rc"] != 0:
                    status = "FAIL-NOISY(one process fails too; %d lines from spill)" % len(lines)
            if status != "refused":
                fails += 1
            summary.append("%s %s rc=%d %.1fs: %s" % (status, desc, a["rc"], a["secs"],
                           " | ".join(a["out"].strip().splitlines()[-4:])))
            print(summary[-1], flush=True)
            if status != "refused":
                print("   " + shell(a["cmd"], jitter), flush=True)
            # the one-process reference on the same config: does it run?
            continue
        if bad:
            fails += 1
            summary.append("FAIL-RAN %s: batch %d not divisible by %d ran" % (desc, B, N))
            print(summary[-1], flush=True)
            continue
        b = run(tag + "b", 0, N * d, args, jitter)
        same_ab = b["rc"] == 0 and a["losses"] == b["losses"] and a["md5"] == b["md5"]
        ra, ma = structure(a["plan"], d, sched)
        rb, mb = structure(b["plan"], N * d, sched)
        line = "%s %.1fs/%.1fs A[%s] B[%s]" % (desc, a["secs"], b["secs"], a["plan"], b["plan"])
        if same_ab:
            summary.append("ok   " + line)
            print(summary[-1], flush=True)
            continue
        if b["rc"] != 0:
            summary.append("B-FAILED " + line + " :: " + b["out"].strip().splitlines()[-1])
            print(summary[-1], flush=True)
        # the replica-equivalent reference
        cargs = list(args)
        k = cargs.index("--schedule")
        cargs[k + 1] = "dp-swap"
        if "--chunks" in cargs:
            j = cargs.index("--chunks")
            del cargs[j:j + 2]
        if "--microbatch" in cargs:
            j = cargs.index("--microbatch")
            del cargs[j:j + 2]
        if ma:
            cargs += ["--microbatch", str(ma)]
        c = run(tag + "c", 0, N * ra, cargs, None)
        if c["rc"] != 0 and "--budget" in cargs:  # the reference's own budget
            j = cargs.index("--budget")
            del cargs[j:j + 2]
            c = run(tag + "c", 0, N * ra, cargs, None)
        same_ac = c["rc"] == 0 and a["losses"] == c["losses"] and a["md5"] == c["md5"]
        struct_same = (ra * N, ma) == (rb, mb)
        if same_ac and not struct_same:
            summary.append("diff-plan " + line + " (== %d-replica dp-swap mb %s)" % (N * ra, ma))
        else:
            fails += 1
            summary.append("FAIL-BITS " + line + " C[%s] losses A %s B %s C %s md5 %s %s %s" % (
                c["plan"], a["losses"], b["losses"], c["losses"], a["md5"], b["md5"], c["md5"]))
            summary.append("   A: " + shell(a["cmd"], jitter))
            summary.append("   B: " + shell(b["cmd"], jitter))
            summary.append("   C: " + shell(c["cmd"], None))
        print("\n".join(summary[-1:] if same_ac else summary[-4:]), flush=True)
    print("\n%d configurations, %d failures" % (COUNT, fails))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
