#!/usr/bin/env bash
# One prepared GPU session for issues 13/14 (run from the repository root on the device machine),
# every record written under $OUT:
#   1. versions (nvidia-smi, torch, numba, triton);
#   2. equality on CUDA: the fused Triton stepper compiled for the GPU (tests/test_fused.py), then the
#      dense, grouped and spectral steppers and the fault tests against the CPU reference oracle
#      (tests/test_dense.py, test_grouped.py, test_spectral.py, test_faults.py -k cuda);
#   3. the fused stepper's settings (warps, float64 dot or not) against the CUDA-graph step at
#      d = 4, 16, 64 (fused-sweep.json, benchmarks/fused_sweep.py);
#   4. the CUDA benchmark (bench-cuda.json): naive loop, dense, grouped and (d <= 64) fused steppers
#      early/late (at d = 1024 the grouped one also without its CUDA graphs, grouped_late_eager, and without
#      the torch path's Gram groups, grouped_late_masks), end to
#      end through engine.train, d = 1024 16 64 (5 trials x 16 lambda, m = 200);
#   5. real-job slices (slices.json): `python -m shallowrelu train` of every (d, m) of the paper's
#      Figs 7 + 8 grid (5 trials x 16 lambda, cap 2e7, centred), each stopped by SIGTERM after
#      SLICE_S seconds, those that profiles/gpu trains on the GPU (d >= 256) first; then, while time
#      is left, FUSED_DIMS (default 16) again with SHALLOWRELU_CUDA_STEP=fused, MERGED_DIMS
#      (default 256) with both schemes in one batch (160 runs, train.merge_schemes), TOGETHER
#      (default 4) copies of the d = TOGETHER_D (default 256) job at once, in one train-jobs process
#      (train.jobs_per_process, the GPU profile's) and as separate processes, and last a paper-size
#      two-teacher job (d = 16, m = 25, 5 seeds, one rho) with the default and the fused step; the
#      iteration each reached, from which benchmarks/project_grid.py projects the grid's (and the
#      profile's GPU share's) and the two-teacher sweep's wall time and prints the gain of sharing;
#   6. the arithmetic floor of the slices' last states (floor.json, benchmarks/step_floor.py): the
#      operations per step each layout needs and the job's floor to the cap at the device's data-sheet peak
#      rates (the H200's where nvidia-smi names none that step_floor.PEAKS knows).
# Steps 2-4 are bounded by timeouts (80 + 120 + 75 + 200 s); the slices by BUDGET_S (default 505 s
# from the start), the floor by 45 s: call it with timeout_s = 590. Dry run on a CPU machine:
#   DEVICE=cpu SKIP_CHECKS=1 SLICE_S=10 PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET_S=${BUDGET_S:-505}
SLICE_S=${SLICE_S:-20}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}  # the Python that has torch (PYTHON=.venv/bin/python for a local dry run)
LOG="$OUT/device_log.txt"
elapsed() { echo $(( $(date +%s) - START )); }
say() { echo "[$(elapsed)s] $*" | tee -a "$LOG"; }

say "== versions"
{ nvidia-smi 2>/dev/null | head -15; "$PY" -c "import sys, torch, numpy, numba; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__, 'numba', numba.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')"; "$PY" -c "import triton; print('triton', triton.__version__)" 2>&1 | tail -1; git rev-parse HEAD 2>/dev/null; } 2>&1 | tee -a "$LOG"

if [ -z "${SKIP_CHECKS:-}" ]; then
  say "== the fused Triton stepper compiled for the GPU vs the reference stepper"
  timeout 80 "$PY" -m pytest -q -p no:cacheprovider tests/test_fused.py 2>&1 | tail -15 | tee -a "$LOG"
  say "== equality tests on CUDA (dense, grouped and spectral steppers, faults) vs the CPU reference oracle"
  # (the torch-gram variants at the tests' small d repeat the torch ones; test_torch_gram_groups_match_the_reference
  # takes the torch path's Gram groups to CUDA)
  timeout 120 "$PY" -m pytest -q -p no:cacheprovider tests/test_dense.py tests/test_grouped.py tests/test_spectral.py \
      tests/test_faults.py \
      -k "cuda and not torch-gram" 2>&1 | tail -15 | tee -a "$LOG"
  say "== fused stepper settings vs CUDA graphs (fused-sweep.json)"
  timeout 75 "$PY" benchmarks/fused_sweep.py --device "$DEVICE" --warps 4 8 --out "$OUT/fused-sweep.json" 2>&1 \
      | tail -30 | tee -a "$LOG"
  say "== benchmark (the record is rewritten after each d)"
  # d = 1024 first (its late phase is the slowest job's); end to end long enough at d = 16 and 64
  # that stepping, not the logging points, dominates as in a real job
  timeout 200 "$PY" -m shallowrelu bench --device "$DEVICE" --dims 1024 16 64 --seconds 1 --repeats 2 \
      --warmup-iters 5000 --e2e-iters 3000 100000 50000 --out "$OUT/bench-cuda.json" 2>&1 | tail -20 | tee -a "$LOG"
fi

say "== real-job slices (${SLICE_S} s each)"
"$PY" benchmarks/gpu_slices.py --device "$DEVICE" --seconds "$SLICE_S" --out "$OUT/slices.json" \
    --fused-dims ${FUSED_DIMS:-16} --merged-dims ${MERGED_DIMS:-256} --together ${TOGETHER:-4} \
    --together-d ${TOGETHER_D:-256} --deadline $(( START + BUDGET_S )) --work "$OUT/slices" 2>&1 | tee -a "$LOG"
say "== arithmetic floor of the slices' states (floor.json; benchmarks/step_floor.py, per-run table in the record)"
CKS=$(find "$OUT/slices" -name '.checkpoint-*.pkl' -path '*_graphs/*' 2>/dev/null | sort)
if [ -n "$CKS" ]; then
  # shellcheck disable=SC2086  # one path per word (the slices' folder names have no spaces)
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  timeout 45 "$PY" benchmarks/step_floor.py $CKS ${GPU_NAME:+--gpu "$GPU_NAME"} --out "$OUT/floor.json" 2>&1 | grep -v '^|' | tee -a "$LOG"
fi
rm -rf "$OUT/slices"
"$PY" benchmarks/project_grid.py "$OUT/slices.json" 2>&1 | tee -a "$LOG"
ls -la "$OUT" | tee -a "$LOG"
say "done"
