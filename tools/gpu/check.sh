#!/usr/bin/env bash
# Runs on a lent GPU machine from the repo root, with .gpubin/ (tools/gpu/bundle.sh)
# carried: STEPS="env build gpu demo block train tests" bash tools/gpu/check.sh
# Each step logs to $OUT/logs/STEP.log (tarred into $OUT/logs.tgz) and adds a
# line to $OUT/summary.txt; DEADLINE (s, default 570) keeps the whole inside
# one device call, so the logs come back even when a step runs long.
#   env    nvidia-smi, compilers, python, LD_LIBRARY_PATH
#   build  make -j16 all tests
#   gpu    make test-gpu-run (test_gpu_*: device, kernels, vmm, shim)
#   shim   tests/shim/test_gpu_shim.sh alone, traced (bash -x), 200 s at most; then
#          tools/gpu/shim_modes.sh (issue 35): torch_gpt_shim.py under half its
#          peak with spill, uvm-prefetch, hostmap and uvm side by side, spill mode
#          with expandable_segments and cudaMallocAsync, the same losses as
#          without the shim; its last line shim_vs_uvm=R shim_vs_uvm_prefetch=S
#          shim_vs_unlimited=U (targets 5, 1.5, 0.5); 300 s at most. Its mode,
#          FAIL, target and last lines go into the summary, each run's output
#          into the logs. Build and shim do not fit one call: STEPS=shim in
#          the call after the build's
#   shimmodes  tools/gpu/shim_modes.sh alone, as in shim, within what DEADLINE
#          leaves: STEPS="build shimmodes" fits one call
#   demo   make demo-run (the README's first command)
#   block  make bench-block-gpu against PyTorch eager (python3 on PATH)
#   bf16   the bf16 GPU kernel tests (test_gpu_kernels with SPILL_TEST_BF16_ONLY=1:
#          CUDA bf16 vs CPU bf16 per layer kind, attention at T=1024), then
#          make bench-block-gpu (its last line: bf16_block_vs_torch ...); 240 s at most
#   bf16train  tools/gpu/bf16_train.sh: spill train --precision bf16 on cuda
#          against the host backend, 20 steps (losses within 5e-3), and GPT-2
#          tokens/s in bf16 against fp32 on cuda; 200 s at most
#   big    tools/gpu/big.sh: the largest GPT spill plan --largest gives for this
#          machine (GPU, 3/4 of host memory, 3/4 of free disk) trained 5 steps
#          on cuda, and a 7B-class GPT in bf16 with batch 64; each beside its
#          spill sim prediction; 360 s at most
#   twobw  tools/gpu/twobw.sh: 2bw on cuda flushing every step and once in 4
#          steps, the same bits, and against the host backend (fp32, bf16);
#          GPT-2 tokens/s of 2bw against 1f1b; 150 s at most
#   mpi    tools/gpu/mpi.sh: mpirun -np 1 spill train on cuda (NCCL made through
#          MPI) against the run without mpirun: the same losses; 120 s at most
#   train  make bench-train (4x oversubscribed GPT-2 against unlimited)
#   vmm    make bench-vmm (its GPU part: H2D/D2H through the vmm vs cudaMemcpyAsync)
#   tests  make test-run (every test, with a GPU present)
cd "$(dirname "$0")/../.." || exit 1
R=$PWD/.gpubin/root
export PATH=$PATH:$PWD/.gpubin/bin
export CPATH=$R/include LIBRARY_PATH=$R/lib LD_LIBRARY_PATH=$R/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/gpu-check}
L=$OUT/logs
mkdir -p "$L"
t0=$SECONDS
step() { # name timeout cmd...
	local n=$1 to=$2
	shift 2
	local s=$SECONDS left=$((${DEADLINE:-570} - SECONDS + t0))
	if [ $left -lt 15 ]; then
		echo "== $n skipped: no time left" | tee -a "$OUT/summary.txt"
		return
	fi
	[ "$to" -gt $left ] && to=$left
	timeout "$to" "$@" >"$L/$n.log" 2>&1
	echo "== $n rc=$? $((SECONDS - s))s (at $((SECONDS - t0))s)" | tee -a "$OUT/summary.txt"
}
for s in ${STEPS:-env build gpu demo block train vmm}; do
	case $s in
	env) step env 30 bash -c 'nvidia-smi; gcc --version | head -1; command -v make mpicc python3
		python3 -c "import torch; print(torch.__version__, torch.cuda.is_available())"
		echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; nproc; free -g' ;;
	build) step build 330 make -j16 all tests ;;
	gpu) step gpu 200 make test-gpu-run && tail -30 "$L/gpu.log" ;;
	shim | shimmodes)
		if [ "$s" = shim ]; then
			O=build/release step shim 200 bash -x tests/shim/test_gpu_shim.sh
			grep -n "FAIL\|^[0-9]\. " "$L/shim.log" | head -20 >>"$OUT/summary.txt"
		fi
		# the script's own limit: what DEADLINE leaves, 20 s kept, 280 s at most
		m=$((${DEADLINE:-570} - SECONDS + t0 - 20))
		SHIM_MODES_TOTAL=$((m < 280 ? m : 280)) SHIM_MODES_LOGS=$L/shim-modes step shim-modes 300 bash tools/gpu/shim_modes.sh
		grep -E "^(mode |FAIL|SKIP|targets:|shim_vs_)" "$L/shim-modes.log" >>"$OUT/summary.txt" ;;
	demo) step demo 90 make demo-run && grep -vE "^step +[0-9]+/" "$L/demo.log" | head -40 ;;
	block) PYTHON=python3 step block 120 make bench-block-gpu && tail -5 "$L/block.log" ;;
	bf16) step bf16-test 120 env SPILL_TEST_BF16_ONLY=1 build/release/tests/kernels/test_gpu_kernels &&
		tail -40 "$L/bf16-test.log"
		PYTHON=python3 step bf16-bench 120 make bench-block-gpu && tail -12 "$L/bf16-bench.log" ;;
	bf16train) step bf16train 200 bash tools/gpu/bf16_train.sh && tail -6 "$L/bf16train.log" ;;
	mpi) step mpi 120 bash tools/gpu/mpi.sh && tail -4 "$L/mpi.log" ;;
	twobw) step twobw 150 bash tools/gpu/twobw.sh && tail -8 "$L/twobw.log" ;;
	big) step big 360 bash tools/gpu/big.sh && tail -12 "$L/big.log" ;;
	train) step train 300 make bench-train && tail -5 "$L/train.log" ;;
	vmm) step vmm 200 make bench-vmm && tail -8 "$L/vmm.log" ;;
	tests) step tests 500 make test-run && grep -E "FAIL|passed" "$L/tests.log" | tail -20 ;;
	*) echo "unknown step $s" ;;
	esac
done
cp bench/results/*.json "$L/" 2>/dev/null
# each test's whole log (run-tests.sh shows only the tail of a failure)
cp -r build/release/test-logs "$L/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
cat "$OUT/summary.txt"
