# Shared definitions: output locations, the run registry, resource formulas, DEFAULT_TARGETS,
# and the helper functions of every rules file (snakemake --lint wants them here).
#
# Every experiment family (a workflow/rules/*.smk file) asks for the runs it needs with
# request_runs(...) at parse time and gets back the exact run files to use as inputs;
# train.smk (included last) then creates one training rule per registered trial
# (scheme, d, m, seed) covering the union of the λ values that families asked for.
import json
import math
import shlex
import sys
from pathlib import Path

REPO = str(Path(workflow.basedir).resolve())
SRC = f"{REPO}/src"
sys.path.insert(0, SRC)
from shallowrelu.workflow_config import prepend_interpreter_path, prepend_pythonpath, train_memory_mb  # noqa: E402

# Jobs inherit this environment: every rule finds the package of this checkout, also in the
# conda environments (which do not install it) and in jobs that Snakemake submits to Slurm,
# and runs the `python` of the environment that runs Snakemake (not the first on PATH).
prepend_pythonpath(SRC)
prepend_interpreter_path(sys.executable)
from shallowrelu.aggregate import PAPER_TABLES  # noqa: E402
from shallowrelu.io import provenance_path, run_stem  # noqa: E402  (the one place for the file layout)
from shallowrelu.plotting import angle_figure_spec, curve_figure_spec, seeds_for  # noqa: E402

# Outputs (relative to the working directory) and repository files (absolute, so that
# `snakemake --directory DIR` works from anywhere).
RESULTS = config["results_dir"].rstrip("/")
RUNS = f"{RESULTS}/runs"
TABLES = f"{RESULTS}/tables"
FIGURES = f"{RESULTS}/figures"
NOTEBOOKS = f"{RESULTS}/notebooks"
LOGS = f"{RESULTS}/logs"
REFERENCE = f"{REPO}/data/reference_tables.csv"
NOTEBOOK_SRC = f"{REPO}/notebooks"
TRAIN = config["train"]
GRID = config["grid"]
CURVES = config["loss_curves"]

# Files that `rule all` (the default target) builds; families extend this list.
DEFAULT_TARGETS = []

# Registry of trials: (root, scheme, d, m, seed, rho) -> set of λ exponents to train.
TRIALS = {}


# --- runs and training jobs -------------------------------------------------------------


def request_runs(scheme, d, m, seeds, lambda_exps, root=None, rho=None, suffixes=(".json", ".npz")):
    """Register the runs scheme × d × m × seeds × λ = 4^e and return their file paths.

    The paths follow shallowrelu.io.run_stem (ROOT/{scheme}/d{d}/m{m}/seed{seed}/lam{tag}).
    Runs with a non-default ``rho`` must use their own ``root`` (rho is not part of the path).
    Call at parse time (module level of a rules file), not from an input function.
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
            stem = run_stem(root, scheme, d, m, seed, e)
            paths.extend(f"{stem}{s}" for s in suffixes)
    return paths


def trial_outputs(key):
    """All files the training job of one registered trial writes (trial.npz, per-run .json/.npz)."""
    root, scheme, d, m, seed, _rho = key
    stems = [run_stem(root, scheme, d, m, seed, e) for e in sorted(TRIALS[key], reverse=True)]
    return [str(stems[0].parent / "trial.npz")] + [f"{s}{x}" for s in stems for x in (".json", ".npz")]


def training_jobs():
    """The training jobs: registered trials with the same (root, scheme, d, m, rho, λ set),
    ``train.seeds_per_job`` seeds at a time (in seed order), as lists of trial keys. With
    ``train.merge_schemes``, the schemes of a (root, d, m, rho, λ set) that have the same seeds
    share each job (one batch: keys scheme by scheme, each with the job's seeds). Jobs that
    train.cpu_below_d moves to the CPU have one trial each."""
    by_cell = {}
    for key in sorted(TRIALS, key=lambda k: k[:5]):
        root, scheme, d, m, _seed, rho = key
        cell = (root, d, m, rho, tuple(sorted(TRIALS[key], reverse=True)))
        by_cell.setdefault(cell, {}).setdefault(scheme, []).append(key)
    jobs = []
    for (_root, d, *_), by_scheme in by_cell.items():
        cpu = on_cpu(d)  # train.cpu_below_d: laid out as for a CPU
        per = 1 if cpu else TRAIN["seeds_per_job"]
        seed_lists = {tuple(k[4] for k in keys) for keys in by_scheme.values()}
        if TRAIN["merge_schemes"] and not cpu and len(by_scheme) > 1 and len(seed_lists) == 1:
            n = len(next(iter(seed_lists)))
            jobs += [[k for keys in by_scheme.values() for k in keys[i:i + per]] for i in range(0, n, per)]
        else:
            jobs += [keys[i:i + per] for keys in by_scheme.values() for i in range(0, len(keys), per)]
    return jobs


def training_processes():
    """The registry's training jobs (lists of trial keys) grouped into processes (in_processes)."""
    def work_per_step(keys):  # d·n·m per run (n = d) times the job's runs
        return keys[0][2] ** 2 * keys[0][3] * len(keys) * len(TRIALS[keys[0]])

    return in_processes(training_jobs(), work_per_step, lambda keys: keys[0][2])


def in_processes(jobs, work, dim):
    """Jobs grouped into processes: one each, or ``train.jobs_per_process`` at a time, the most
    ``work`` together (so that a process's jobs end at similar times). Jobs whose dimension
    ``dim(job)`` train.cpu_below_d moves to the CPU keep a process each (one core each)."""
    per = TRAIN["jobs_per_process"]
    cpu = [[j] for j in jobs if on_cpu(dim(j))]
    jobs = [j for j in jobs if not on_cpu(dim(j))]
    if per == 1:
        return [[j] for j in jobs] + cpu
    jobs = sorted(jobs, key=work, reverse=True)
    return [jobs[i:i + per] for i in range(0, len(jobs), per)] + cpu


def on_cpu(d):
    """Whether a training job at input dimension d runs on the CPU although train.device is a
    GPU (or auto): d below train.cpu_below_d."""
    below = TRAIN.get("cpu_below_d")
    return below is not None and d < below and TRAIN["device"] != "cpu"


def job_device(d):
    """The --device of a training job at input dimension d (train.device, or cpu: on_cpu)."""
    return "cpu" if on_cpu(d) else TRAIN["device"]


def process_name(names):
    """Rule name of a training process from its jobs' names, e.g. train_centred_d16_m200_seeds0_1_2_with_7_more."""
    return names[0] + (f"_with_{len(names) - 1}_more" if len(names) > 1 else "")


def train_args(schemes, d, m, seeds, exps, root, rho=None, max_iters=None, loss_target=None):
    """The arguments of one job's train command (--threads excepted), from the train settings."""
    args = (f"--scheme {' '.join(dict.fromkeys(schemes))} --d {d} --m {m}"
            f" --seeds {' '.join(str(s) for s in dict.fromkeys(seeds))}"
            f" --lambda-exps {' '.join(map(str, exps))} --out {shlex.quote(str(root))}"
            f" --max-iters {TRAIN['max_iters'] if max_iters is None else max_iters} --n-log {TRAIN['n_log']}"
            f" --loss-convention {TRAIN['loss_convention']} --active-rule {TRAIN['active_rule']}"
            f" --device {job_device(d)} --dtype {TRAIN['dtype']} --checkpoint-every {TRAIN['checkpoint_every_s']}")
    return (args + ("" if rho is None else f" --rho {rho!r}")
            + ("" if loss_target is None else f" --loss-target {loss_target!r}"))


def registry_job_args(keys):
    """train_args of a registry job (its trials' keys)."""
    root, _, d, m, _, rho = keys[0]
    return train_args([k[1] for k in keys], d, m, [k[4] for k in keys], sorted(TRIALS[keys[0]], reverse=True),
                      runs_root_of(trial_outputs(keys[0])), rho)


def train_jobs_command(job_args):
    """``train-jobs --job 'ARGS' …``: several jobs (their train_args) in one process."""
    return "train-jobs " + " ".join(f"--job {shlex.quote(a)}" for a in job_args)


def process_resources(each):
    """A training process's resources from its jobs': memory summed, the longest runtime (they
    run side by side), the rest (one GPU where on CUDA, partition, account) as the first's."""
    res = dict(each[0])
    res["mem_mb"] = sum(r["mem_mb"] for r in each)
    res["runtime"] = max(r["runtime"] for r in each)
    return res


def job_name(keys):
    """Rule name of a training job: trial_name of a single trial, else with all its schemes and
    seeds, e.g. train_centred_d16_m200_seeds0_1_2, train_centred_uncentred_d16_m200_seed0."""
    if len(keys) == 1:
        return trial_name(keys[0])
    root, _, d, m, _, _ = keys[0]
    schemes = list(dict.fromkeys(k[1] for k in keys))
    seeds = list(dict.fromkeys(k[4] for k in keys))
    part = f"seed{seeds[0]}" if len(seeds) == 1 else "seeds" + "_".join(map(str, seeds))
    return _rule_slug(root, schemes, d, m, part)


def trial_name(key):
    """Rule name of a trial's training job, e.g. train_centred_d16_m200_seed0."""
    root, scheme, d, m, seed, _rho = key
    return _rule_slug(root, [scheme], d, m, f"seed{seed}")


def _rule_slug(root, schemes, d, m, seeds_part):
    prefix = "" if root == RUNS else f"_{Path(root).name}"
    slug = f"train{prefix}_{'_'.join(schemes)}_d{d}_m{m}_{seeds_part}"
    return "".join(c if c.isalnum() or c == "_" else "_" for c in slug)


def runs_root_of(output):
    """The runs root of a training job, from its first output ROOT/scheme/dD/mM/seedS/trial.npz."""
    return str(Path(output[0]).parents[4])


def trial_runtime_minutes(d, m, n_runs, max_iters, n=None):
    """Runtime estimate of a training job (minutes), an upper bound (converged runs stop early):

        seconds = max_iters × (s_per_iter + s_per_unit × n_runs × n × m × d) × runtime_safety

    (n = d data points). s_per_iter is the per-iteration overhead of the batched step,
    s_per_unit the cost per multiply-add; both measured on one CPU core (docs/workflow.md).
    Capped at train.resources.runtime_max_minutes when set (jobs resume from checkpoints).
    """
    res = TRAIN["resources"]
    n = d if n is None else n
    per_iter = res["seconds_per_iteration"] + res["seconds_per_unit"] * n_runs * n * m * d
    sec = max_iters * per_iter * res["runtime_safety"]
    minutes = max(res["runtime_min_minutes"], math.ceil(sec / 60))
    cap = res.get("runtime_max_minutes")
    return minutes if cap is None else min(minutes, cap)


def trial_mem_mb(d, m, n_runs, n_trials=None, n=None):
    """Memory request (MB) of a training job of n_runs runs on n_trials trials (default: one per
    run, an upper bound), n points (default d): mem_mb_base + mem_safety × the fitted peak RSS of
    shallowrelu.workflow_config.train_memory_mb (its docstring has the model and its fit;
    docs/workflow.md, "Resources")."""
    res = TRAIN["resources"]
    return train_memory_mb(d, m, n_runs, n_runs if n_trials is None else n_trials, n=n, n_log=TRAIN["n_log"],
                           base_mb=res["mem_mb_base"], safety=res["mem_safety"])


def trial_resources(d, m, n_runs, n_trials=None, n=None):
    """Resources of a training job: mem_mb, runtime, and slurm_partition / gpu where configured."""
    res = {"mem_mb": trial_mem_mb(d, m, n_runs, n_trials, n),
           "runtime": trial_runtime_minutes(d, m, n_runs, TRAIN["max_iters"])}
    if TRAIN["resources"]["slurm_partition"]:
        res["slurm_partition"] = TRAIN["resources"]["slurm_partition"]
    if TRAIN["resources"].get("slurm_account"):
        res["slurm_account"] = TRAIN["resources"]["slurm_account"]
    if str(job_device(d)).startswith("cuda"):
        res["gpu"] = 1
    return res


def job_resources(job):
    """trial_resources of a training job given as a dict (dynamics.smk's jobs: d, m, seeds,
    max_iters, n), with the runtime of its own iteration cap and number of points."""
    return dict(trial_resources(job["d"], job["m"], len(job["seeds"]) * len(job["exps"]), len(job["seeds"]), n=job["n"]),
                runtime=trial_runtime_minutes(job["d"], job["m"], len(job["seeds"]), job["max_iters"], n=job["n"]))


def job_group(runtime_minutes):
    """A training job's Snakemake group: train.group if its runtime estimate is at most
    train.group_max_minutes (null: any), else none. A bundle's trials run one after another and it
    asks for the sum of their runtimes (docs/cluster.md, "Bundling small trials")."""
    cap = TRAIN["group_max_minutes"]
    return TRAIN["group"] if cap is None or runtime_minutes <= cap else None


def as_json(obj):
    """Compact JSON for shell arguments in single quotes (papermill -y, aggregate)."""
    text = json.dumps(obj, separators=(",", ":"))
    if "'" in text:
        raise ValueError(f"cannot pass a value with a single quote through the shell: {text[:80]}")
    return text


# --- figures (figures.smk) ----------------------------------------------------------------


def angle_fig_runs(fig):
    """Register and return the run summaries Fig 1 (centred row of Fig 7), 7 or 8 plots."""
    s = angle_figure_spec(config, fig)
    return [p for sc in s["schemes"] for d in s["dims"] for m in s["widths"]
            for p in request_runs(sc, d, m, seeds_for(s, d), s["lambda_exps"], suffixes=(".json",))]


def curve_fig_runs(fig):
    """Register and return the run files (.json, .npz) Fig 2 or 9 plots."""
    c = curve_figure_spec(config, fig)
    return request_runs(c["scheme"], c["d"], c["m"], [c["seed"]], c["lambda_exps"])


def figure_files(fig):
    return [f"{FIGURES}/{fig}.pdf", f"{FIGURES}/{fig}.png", f"{FIGURES}/{fig}.axes.json"]


def notebook_params(spec, output):
    """papermill -y parameters: the figure's selection plus where to read and write."""
    return as_json(dict(spec, runs_dir=RUNS, reference=REFERENCE, out_stem=str(Path(output.pdf).with_suffix(""))))


# --- tables (aggregate.smk) ---------------------------------------------------------------


def main_store_trials():
    """Registered trials of the main run store as aggregate --trials specs (call at DAG time)."""
    return [dict(root=k[0], scheme=k[1], d=k[2], m=k[3], seed=k[4], lambda_exps=sorted(v, reverse=True))
            for k, v in sorted(TRIALS.items(), key=lambda kv: kv[0][:5]) if k[0] == RUNS]


def main_store_runs(wildcards):
    return [f"{run_stem(t['root'], t['scheme'], t['d'], t['m'], t['seed'], e)}.json"
            for t in main_store_trials() for e in t["lambda_exps"]]


def table_figures():
    """Fig 7 / Fig 8 grids whose paper tables (1-6 / 7-12) are written as LaTeX."""
    if not GRID["enabled"]:
        return {}
    return {f: dict(GRID[f], lambda_exps=GRID["lambda_exps"]) for f in ("fig7", "fig8")}


def table_files():
    figs = table_figures()
    numbers = sorted({n for (fig, _metric, scheme), n in PAPER_TABLES.items()
                      if f"fig{fig}" in figs and scheme in figs[f"fig{fig}"]["schemes"]})
    return [f"{TABLES}/table{n}.tex" for n in numbers]


# -- Appendix G helpers (used by workflow/rules/appendix_g.smk) --------------------------
def appg_list(xs):
    """Floats as space-separated CLI arguments."""
    return " ".join(repr(float(x)) for x in xs)

def provenance_file(table):
    """The provenance record the dichotomy command writes beside ``table`` (io.write_with_provenance)."""
    return str(provenance_path(table))

def appg_sweep_args(name):
    """CLI arguments of one sweep dataset: family, d, its parameter and the training settings."""
    sw = config["appendix_g"]["sweep"]
    ds = sw["datasets"][name]
    par = f"--xi {float(ds['xi'])}" if ds["family"] == "negative" else f"--b {float(ds['b'])}"
    lr = "" if sw.get("lr") is None else f" --lr {float(sw['lr'])}"
    return (f"--family {ds['family']} --d {int(ds['d'])} {par} --m {int(sw['m'])} --seed {int(sw['seed'])}"
            f" --lambda-exps {' '.join(str(int(e)) for e in sw['lambda_exps'])}"
            f" --loss-convention {sw['loss_convention']}{lr} --loss-target {float(sw['loss_target'])}"
            f" --max-iters {int(sw['max_iters'])} --n-log {int(sw['n_log'])}")
