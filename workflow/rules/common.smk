# Shared definitions: output locations, the run registry, resource formulas, DEFAULT_TARGETS.
#
# Every experiment family (a workflow/rules/*.smk file) asks for the runs it needs with
# request_runs(...) at parse time and gets back the exact run files to use as inputs;
# train.smk (included last) then creates one training rule per registered trial
# (scheme, d, m, seed) covering the union of the λ values that families asked for.
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir, "src")))
from shallowrelu.io import lambda_tag, run_stem  # noqa: E402  (one place for the file layout)

RESULTS = config["results_dir"].rstrip("/")
RUNS = f"{RESULTS}/runs"
TABLES = f"{RESULTS}/tables"
FIGURES = f"{RESULTS}/figures"
NOTEBOOKS = f"{RESULTS}/notebooks"
LOGS = f"{RESULTS}/logs"
TRAIN = config["train"]

# Files that `rule all` (the default target) builds; families extend this list.
DEFAULT_TARGETS = []

# Registry of trials: (root, scheme, d, m, seed, rho) -> set of λ exponents to train.
TRIALS = {}


def request_runs(scheme, d, m, seeds, lambda_exps, root=None, rho=None, suffixes=(".json", ".npz")):
    """Register the runs scheme × d × m × seeds × λ = 4^e and return their file paths.

    The paths follow shallowrelu.io.run_stem (ROOT/{scheme}/d{d}/m{m}/seed{seed}/lam{tag}).
    Runs with a non-default ``rho`` must use their own ``root`` (rho is not part of the path).
    """
    root = RUNS if root is None else str(root).rstrip("/")
    if isinstance(seeds, int):
        seeds = [seeds]
    paths = []
    for seed in seeds:
        key = (root, str(scheme), int(d), int(m), int(seed), None if rho is None else float(rho))
        other = [k for k in TRIALS if k[:5] == key[:5] and k[5] != key[5]]
        if other:
            raise ValueError(f"trial {key[:5]} requested with rho={key[5]} and rho={other[0][5]}; "
                             "runs with different rho need different roots")
        TRIALS.setdefault(key, set()).update(int(e) for e in lambda_exps)
        for e in lambda_exps:
            stem = str(run_stem(root, scheme, d, m, seed, e))
            paths.extend(stem + s for s in suffixes)
    return paths


def trial_outputs(key):
    """All files the training job of one registered trial writes (trial.npz, per-run .json/.npz)."""
    root, scheme, d, m, seed, _rho = key
    stems = [str(run_stem(root, scheme, d, m, seed, e)) for e in sorted(TRIALS[key], reverse=True)]
    trial_file = str(Path(stems[0]).parent / "trial.npz")
    return [trial_file] + [s + x for s in stems for x in (".json", ".npz")]


def trial_name(key):
    """Rule name of a trial's training job, e.g. train_centred_d16_m200_seed0."""
    root, scheme, d, m, seed, _rho = key
    prefix = "" if root == RUNS else "_" + Path(root).name
    slug = f"train{prefix}_{scheme}_d{d}_m{m}_seed{seed}"
    return "".join(c if c.isalnum() or c == "_" else "_" for c in slug)


def trial_units(d, m, n_runs, max_iters, n=None):
    """Arithmetic size of a trial job: runs × iterations × n × m × d (n = d points by default)."""
    n = d if n is None else n
    return n_runs * max_iters * n * m * d


def trial_runtime_minutes(d, m, n_runs, max_iters):
    """Runtime estimate of a training job (minutes): size × measured seconds per unit × safety.

    An upper bound: runs that reach the loss target stop early. seconds_per_unit is measured on
    one CPU core (docs/workflow.md); override train.resources.seconds_per_unit for your machine.
    """
    res = TRAIN["resources"]
    sec = trial_units(d, m, n_runs, max_iters) * res["seconds_per_unit"] * res["runtime_safety"]
    return max(res["runtime_min_minutes"], math.ceil(sec / 60))


def trial_mem_mb(d, m, n_runs):
    """Memory estimate (MB): base + safety × ~12 float64 arrays of size runs × m × (n + d)."""
    res = TRAIN["resources"]
    arrays = 12 * n_runs * m * (2 * d) * 8 / 1e6
    return int(res["mem_mb_base"] + math.ceil(res["mem_safety"] * arrays))


def uses_gpu():
    return str(TRAIN["device"]).startswith("cuda")


def analysis_log(name):
    return f"{LOGS}/{name}.log"


def as_json(obj):
    """Compact JSON for papermill -y (valid YAML, no single quotes)."""
    return json.dumps(obj, separators=(",", ":"))
