#!/usr/bin/python3
"""bench/optim_deepspeed.py — DeepSpeed's own CPU Adam (DeepSpeedCPUAdam, AdamW mode,
fp32 params, grads and state) timed on the sizes given, the baseline of bench/optim.c.

  optim_deepspeed.py --threads T [--reps R] N...   prints "ds N seconds" (best of R
      steps after a warm-up) per size, or one "skip <why>" line and exits 0.
  optim_deepspeed.py --setup VENV                  makes VENV (over this python's
      packages, Debian's python3-torch) and pip-installs deepspeed there; says why not.

DeepSpeed builds its cpu_adam op with ninja and g++ at first use (torch's JIT
extensions, cached under VENV/torch_extensions). Neither torch nor deepspeed is a
dependency of spill: without them bench-optim reports S as skipped."""
import os
import shutil
import subprocess
import sys
import time

PIP_DEPS = ["einops", "hjson", "msgpack", "ninja", "packaging", "psutil", "py-cpuinfo",
            "pydantic>=2", "tqdm"]


def skip(why):
    print("skip " + why, flush=True)
    return 0


def setup(venv):
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py):
        probe = subprocess.run([py, "-c", "import deepspeed"], capture_output=True,
                               env=dict(os.environ, DS_ACCELERATOR="cpu"))
        if probe.returncode == 0:
            return 0
    try:
        import torch  # noqa: F401  (the venv sees this python's torch)
    except ImportError:
        print("bench-optim: no torch for %s (apt-get install python3-torch): "
              "DeepSpeed not installed" % sys.executable)
        return 1
    print("bench-optim: installing deepspeed into %s (pip, over %s's torch)" %
          (venv, sys.executable), flush=True)
    try:
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                           check=True, timeout=300)
        pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # deepspeed's sdist imports torch to build: no isolation, no pip-installed
        # torch (PyPI's is a CUDA build of GBs; Debian's CPU torch is enough)
        subprocess.run(pip + ["--no-build-isolation", "--no-deps", "deepspeed"], check=True,
                       timeout=900, env=dict(os.environ, DS_ACCELERATOR="cpu", DS_BUILD_OPS="0"))
        subprocess.run(pip + PIP_DEPS, check=True, timeout=900)
    except (subprocess.SubprocessError, OSError) as e:
        print("bench-optim: cannot install deepspeed: %s" % e)
        return 1
    return 0


def main(argv):
    if argv[:1] == ["--setup"] and len(argv) == 2:
        return setup(argv[1])
    threads, reps, sizes = 1, 5, []
    it = iter(argv)
    for a in it:
        if a == "--threads":
            threads = int(next(it))
        elif a == "--reps":
            reps = int(next(it))
        else:
            sizes.append(int(a))
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(venv, "torch_extensions"))
    try:
        import torch
    except ImportError as e:
        return skip("no torch for %s: %s" % (sys.executable, e))
    torch.set_num_threads(threads)
    # what the op's JIT build needs, checked here to say so instead of a compiler error
    from torch.utils import cpp_extension
    inc = cpp_extension.include_paths() + ["/usr/include", "/usr/local/include"]
    need = {"torch/extension.h": "libtorch-dev", "pybind11/pybind11.h": "pybind11-dev"}
    missing = [pkg for h, pkg in need.items()
               if not any(os.path.exists(os.path.join(d, h)) for d in inc)]
    if missing:
        return skip("no headers to build DeepSpeed's cpu_adam op (apt-get install %s)" %
                    " ".join(missing))
    if not shutil.which("c++"):
        return skip("no C++ compiler to build DeepSpeed's cpu_adam op")
    try:
        from deepspeed.ops.op_builder.cpu import builder as cpu_builder
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except Exception as e:  # ImportError, or deepspeed's own checks failing
        return skip("deepspeed not importable for %s: %s" %
                    (sys.executable, str(e).splitlines()[0] if str(e) else type(e).__name__))
    # torch < 2.1 compiles extensions with -std=c++14, deepspeed's CPU ops need
    # C++17: a later -std wins, so add it to the op's own flags
    cxx_args = cpu_builder.CPUOpBuilder.cxx_args
    cpu_builder.CPUOpBuilder.cxx_args = lambda self: cxx_args(self) + ["-std=c++17"]
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        p = torch.nn.Parameter(torch.rand(n, generator=g) - 0.5)
        p.grad = (torch.rand(n, generator=g) - 0.5) * 1e-3
        try:
            opt = DeepSpeedCPUAdam([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                   weight_decay=0.01, adamw_mode=True, fp32_optimizer_states=True)
        except Exception as e:
            return skip("DeepSpeed's cpu_adam op did not build: %s" %
                        (str(e).splitlines()[0] if str(e) else type(e).__name__))
        opt.step()  # warm-up: allocates m and v
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            opt.step()
            best = min(best, time.perf_counter() - t0)
        print("ds %d %.9f" % (n, best), flush=True)
        del opt, p
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
