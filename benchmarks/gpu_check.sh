#!/usr/bin/env bash
# One prepared GPU session for issue 6 (run from the repository root on the device machine):
# versions, the fast-path equality tests on CUDA, the CUDA benchmark (JSON to $OUT), then the
# d = 4 and d = 16 grid (both schemes, m = 200, λ = 4^2..4^-13, seeds 0-4, cap 2e7) trained
# until the time budget runs out. SIGTERM makes each job write a checkpoint and stop; the run
# summaries (*.json) that finished, and the checkpoints, are packed into tarballs in $OUT.
#   BUDGET_S: seconds from start until the training jobs are told to stop (default 480).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET_S=${BUDGET_S:-480}
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu SKIP_CHECKS=1 BUDGET_S=30 for a dry run of the training part
LOG="$OUT/device_log.txt"
elapsed() { echo $(( $(date +%s) - START )); }
say() { echo "[$(elapsed)s] $*" | tee -a "$LOG"; }

say "== versions"
{ nvidia-smi; python3 -c "import sys, torch, numpy; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__, torch.cuda.get_device_name())"; } 2>&1 | tee -a "$LOG"

if [ -z "${SKIP_CHECKS:-}" ]; then
say "== equality tests on CUDA (fast path on the GPU vs the CPU reference oracle)"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_fast.py tests/test_stable.py tests/test_core.py -k "cuda or engine_matches_reference" 2>&1 | tail -15 | tee -a "$LOG"

say "== benchmark"
timeout 230 python3 -m shallowrelu bench --device cuda --seconds 1 --repeats 2 --warmup-iters 5000 \
    --out "$OUT/bench-cuda.json" 2>&1 | tee -a "$LOG"
if ! python3 -c "import json,sys; sys.exit(0 if json.load(open('$OUT/bench-cuda.json'))['complete'] else 1)"; then
  say "benchmark incomplete: stopping before the training part"; exit 3
fi
fi

say "== grid training d=4,16 x centred,uncentred (until ${BUDGET_S}s)"
pids=()
for d in 4 16; do
  for scheme in centred uncentred; do
    python3 -m shallowrelu train --scheme $scheme --d $d --m 200 --seeds 0 1 2 3 4 --lambda-exps 2..-13 \
        --max-iters 20000000 --loss-convention authors --device $DEVICE --checkpoint-every 120 \
        --out "$OUT/runs" > "$OUT/train_${scheme}_d$d.log" 2>&1 &
    pids+=($!)
  done
done
while [ "$(elapsed)" -lt "$BUDGET_S" ]; do
  alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [ $alive -eq 0 ] && break
  sleep 5
done
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
for i in $(seq 1 20); do
  alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [ $alive -eq 0 ] && break
  sleep 1
done
for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
for f in "$OUT"/train_*.log; do say "$(basename "$f"): $(tail -c 600 "$f" | tr '\r' '\n' | tail -3)"; done
cd "$OUT" || exit 1
if [ -d runs ]; then
  n=$(find runs -name 'lam*.json' | wc -l)
  say "finished run summaries: $n of 320"
  find runs -name '*.json' -print0 | tar czf gpu_runs_d4_d16_json.tar.gz --null -T -
  find runs -name '.checkpoint*' -print0 | tar czf gpu_runs_d4_d16_checkpoints.tar.gz --null -T -
  python3 - <<'EOF' 2>&1 | tee -a "$LOG"
import json, glob, collections
rows = [json.load(open(p)) for p in glob.glob("runs/**/lam*.json", recursive=True)]
c = collections.Counter((r["run"]["scheme"], r["run"]["d"], r["stop_reason"]) for r in rows)
for k, v in sorted(c.items()):
    print(k, v)
its = sorted(r["iterations"] for r in rows)
if its:
    print("iterations of finished runs: min", its[0], "median", its[len(its) // 2], "max", its[-1])
EOF
  rm -rf runs
fi
ls -la "$OUT" | tee -a "$LOG"
say "done"
