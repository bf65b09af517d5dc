"""The Snakemake workflow: DAG sizes, lint, config validation, aggregation, and a tiny end-to-end run.

Every Snakemake call runs with ``--directory`` in a temporary folder, so results/ of the
checkout is never touched.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
import yaml

from shallowrelu.aggregate import CELL_COLUMNS, RUN_COLUMNS, cell_stats, load_reference
from shallowrelu.workflow_config import check_unknown_keys, coerce_cli_strings, load_schema

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
# Families owned by other rules files: switched off where this file counts jobs.
OTHERS_OFF = [f"{k}={{enabled: false}}" for k in ("appendix_g", "dynamics", "two_teacher", "paper")]


def snakemake(workdir: Path, *args: str, configfile: str | Path = "config/config.yaml", config=(),
              timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(REPO / configfile), *args]
    if config:
        cmd += ["--config", *config]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=workdir)


def job_counts(output: str) -> dict[str, int]:
    """The first 'Job stats' table of a Snakemake dry run."""
    block = output.split("Job stats:", 1)[1]
    counts = {}
    for line in block.splitlines()[3:]:
        m = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not m:
            break
        counts[m.group(1)] = int(m.group(2))
    return counts


def expected_trials(cfg: dict) -> dict[tuple, set]:
    """Grid arithmetic, independent of the Snakefile: trial (scheme, d, m, seed) -> its λ exponents."""
    trials: dict[tuple, set] = {}
    g = cfg["grid"]
    for fig in ("fig7", "fig8"):
        for s in g[fig]["schemes"]:
            for d in g[fig]["dims"]:
                for m in g[fig]["widths"]:
                    for seed in g["seeds"]:
                        trials.setdefault((s, d, m, seed), set()).update(g["lambda_exps"])
    for fig in ("fig2", "fig9"):
        c = cfg["loss_curves"][fig]
        trials.setdefault((c["scheme"], c["d"], c["m"], c["seed"]), set()).update(c["lambda_exps"])
    return trials


def dry_run(tmp_path: Path, configfile: str, config=()) -> tuple[dict[str, int], str]:
    res = snakemake(tmp_path, "-n", configfile=configfile, config=[*OTHERS_OFF, *config])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout + res.stderr
    return job_counts(out), out


def train_outputs(out: str) -> dict[str, list[str]]:
    """Training rule name -> its declared .json outputs, from a dry run's job listing."""
    jobs = {}
    for m in re.finditer(r"rule (train_\w+):\n\s+output: ([^\n]+)", out):
        jobs[m.group(1)] = [p for p in m.group(2).split(", ") if p.endswith(".json")]
    return jobs


@pytest.mark.parametrize("configfile, n_trials, n_runs", [
    ("config/config.yaml", 80, 80 * 8 + 2 * 3),     # + λ = 4^-3, 4^-5, 4^-7 of Figs 2 and 9
    ("config/paper.yaml", 71, 70 * 16 + 7),         # Fig 9's trial (uncentred, d=16, m=25) is extra
])
def test_dry_run_job_counts_match_grid(tmp_path, configfile, n_trials, n_runs):
    cfg = yaml.safe_load((REPO / configfile).read_text())
    trials = expected_trials(cfg)
    assert len(trials) == n_trials and sum(map(len, trials.values())) == n_runs
    counts, out = dry_run(tmp_path, configfile, config=['train={"seeds_per_job": 1}'])  # one job per trial
    train = {k: v for k, v in counts.items() if k.startswith("train_")}
    assert len(train) == n_trials and set(train.values()) == {1}
    assert {f"train_{s}_d{d}_m{m}_seed{seed}" for s, d, m, seed in trials} == set(train)
    assert counts["aggregate"] == 1 and counts["fig_angles"] == 3 and counts["fig_loss_curves"] == 2
    assert counts["all"] == 1
    mine = {k: v for k, v in counts.items() if k.startswith("train_") or k in (
        "aggregate", "fig_angles", "fig_loss_curves", "all")}
    assert sum(mine.values()) == n_trials + 1 + 3 + 2 + 1
    assert counts["total"] == sum(v for k, v in counts.items() if k != "total")
    # every trial declares exactly its runs' summaries: the grid's λ plus the loss curves' λ
    outs = train_outputs(out)
    for (s, d, m, seed), exps in trials.items():
        name = f"train_{s}_d{d}_m{m}_seed{seed}"
        assert len(outs[name]) == len(exps), name
    assert sum(len(v) for v in outs.values()) == n_runs


def test_large_d_evidence_config_declares_its_trials_at_the_paper_cap(tmp_path):
    """config/evidence_large_d.yaml: 40 trials at d = 256 and 20 per m at d = 1024 (seeds_by_dim),
    both schemes, all 16 λ, five trials per job, on CUDA at the paper's cap."""
    counts, out = dry_run(tmp_path, "config/evidence_large_d.yaml", config=["train={device: cpu}"])
    outs = train_outputs(out)
    assert len(outs) == 2 * 40 // 5 + 2 * 3 * 20 // 5 and {len(v) for v in outs.values()} == {5 * 16}
    runs = {p for v in outs.values() for p in v}
    assert len(runs) == 2 * 40 * 16 + 2 * 3 * 20 * 16
    assert sum("/d1024/" in p for p in runs) == 2 * 3 * 20 * 16 and not any("seed20/" in p for p in runs
                                                                          if "/d1024/" in p)
    cfg = yaml.safe_load((REPO / "config/evidence_large_d.yaml").read_text())["train"]
    assert (cfg["max_iters"], cfg["device"], cfg["dtype"]) == (20_000_000, "cuda", "float64")


def test_seeds_per_job_batches_trials_and_declares_the_same_runs(tmp_path):
    """train.seeds_per_job = 3: the trials of one (scheme, d, m, λ set) train as one job; the
    declared run summaries are exactly those of one job per trial."""
    _, out1 = dry_run(tmp_path, "config/config.yaml", config=['train={"seeds_per_job": 1}'])
    counts, out3 = dry_run(tmp_path, "config/config.yaml", config=['train={"seeds_per_job": 3}'])
    one, three = train_outputs(out1), train_outputs(out3)
    assert sorted(p for v in three.values() for p in v) == sorted(p for v in one.values() for p in v)
    assert len(three) < len(one)
    batched = [k for k in three if "_seeds" in k]
    assert batched and all(len(three[k]) % 8 == 0 and len(three[k]) > 8 for k in batched)
    assert any(k.endswith("_seeds0_1_2") for k in batched)


def test_merge_schemes_shares_jobs_and_declares_the_same_runs(tmp_path):
    """train.merge_schemes: both schemes of a (d, m, λ set) with the same seeds train as one job
    (``--scheme centred uncentred``); the declared run summaries are exactly those of separate
    jobs. Fig 2's and Fig 9's extra λ make their cells differ: those stay one scheme each."""
    base = 'train={"seeds_per_job": 5'
    _, out_sep = dry_run(tmp_path, "config/config.yaml", config=[base + "}"])
    _, out_mrg = dry_run(tmp_path, "config/config.yaml", config=[base + ', "merge_schemes": true}'])
    sep, mrg = train_outputs(out_sep), train_outputs(out_mrg)
    assert sorted(p for v in mrg.values() for p in v) == sorted(p for v in sep.values() for p in v)
    both = [k for k in mrg if "_centred_uncentred_" in k]
    assert both and len(mrg) == len(sep) - len(both)
    assert "train_centred_uncentred_d4_m200_seeds0_1_2_3_4" in both
    for k in both:
        assert {p.split("/")[-5] for p in mrg[k]} == {"centred", "uncentred"}, k
    res = snakemake(tmp_path, "-n", "-p", "train_centred_uncentred_d4_m200_seeds0_1_2_3_4",
                    config=[*OTHERS_OFF, base + ', "merge_schemes": true}'])
    assert res.returncode == 0, res.stderr[-2000:]
    assert "--scheme centred uncentred --d 4 --m 200 --seeds 0 1 2 3 4 " in res.stdout


def rule_blocks(out: str) -> dict[str, str]:
    """Rule name -> its block (output, log, resources, shell command) in a ``-n -p`` listing."""
    parts = re.split(r"\n(?=(?:local)?rule \w+:\n)", out)
    return {m.group(1): part for part in parts if (m := re.match(r"(?:local)?rule (\w+):\n", part))}


def test_gpu_profile_splits_the_paper_work_between_cpu_and_gpu(tmp_path):
    """profiles/gpu with the paper's config (train.cpu_below_d = 256): the d < 256 jobs (Figs 7 + 8
    at d = 4, 16, 64, Fig 9's trial, Example 31, the two-teacher sweep) run on the CPU, one trial
    per job and per process, without the gpu resource; the GPU's four jobs (d = 256; d = 1024 at
    m = 25, 50, 200), each of both schemes (160 runs), share one train-jobs process at the
    paper's cap."""
    res = snakemake(tmp_path, "-n", "-p", "--profile", str(REPO / "profiles" / "gpu"), configfile="config/paper.yaml")
    assert res.returncode == 0, res.stderr[-2000:]
    blocks = {k: v for k, v in rule_blocks(res.stdout).items() if k.startswith("train_")}
    gpu = {k: v for k, v in blocks.items() if "gpu=1" in v}
    cpu = {k: v for k, v in blocks.items() if "gpu=1" not in v}
    (proc,) = gpu.values()
    jobs = proc.split("train-jobs", 1)[1].split("--job ")[1:]
    assert sorted(re.search(r"--d (\d+) --m (\d+) ", j).groups() for j in jobs) == [
        ("1024", "200"), ("1024", "25"), ("1024", "50"), ("256", "200")]
    assert all("--scheme centred uncentred" in j and "--seeds 0 1 2 3 4 " in j and "--device cuda" in j
               and "--max-iters 20000000" in j for j in jobs)
    assert all("python -m shallowrelu train " in v and "--device cpu" in v and "--device cuda" not in v
               for v in cpu.values())
    grid = [k for k in cpu if re.fullmatch(r"train_(centred|uncentred)_d(4|16|64)_m200_seed\d", k)]
    assert len(grid) == 2 * 3 * 5
    assert sum(k.startswith("train_two_teacher_") for k in cpu) == 54
    assert len(cpu) == 30 + 1 + 1 + 54  # + Fig 9's trial and Example 31


def test_cpu_below_d_moves_small_jobs_to_the_cpu_and_declares_the_same_runs(tmp_path):
    """train.cpu_below_d with a GPU device: jobs at d below it have --device cpu, one trial each,
    one per process and no gpu resource; the others keep the GPU layout; the declared runs are
    exactly those of the plain layout. On the CPU (train.device cpu) the option changes nothing."""
    gpu = 'train={"device": "cuda", "seeds_per_job": 5, "merge_schemes": true, "jobs_per_process": 3'
    _, out_plain = dry_run(tmp_path, "config/config.yaml", config=['train={"seeds_per_job": 1}'])
    res = snakemake(tmp_path, "-n", "-p", config=[*OTHERS_OFF, gpu + ', "cpu_below_d": 64}'])
    assert res.returncode == 0, res.stderr[-2000:]
    split, plain = train_outputs(res.stdout), train_outputs(out_plain)
    assert sorted(p for v in split.values() for p in v) == sorted(p for v in plain.values() for p in v)
    for name, block in rule_blocks(res.stdout).items():
        if not name.startswith("train_"):
            continue
        d = int(re.search(r"--d (\d+) ", block).group(1))
        if d < 64:
            assert re.fullmatch(r"train_(centred|uncentred)_d\d+_m\d+_seed\d+", name), name
            assert "--device cpu" in block and "gpu=1" not in block and "train-jobs" not in block, name
        else:
            assert "--device cuda" in block and "gpu=1" in block and "--device cpu" not in block, name
    _, out_cpu = dry_run(tmp_path, "config/config.yaml", config=['train={"seeds_per_job": 1, "cpu_below_d": 64}'])
    assert train_outputs(out_cpu) == plain


def test_jobs_per_process_trains_through_train_jobs(tmp_path):
    """train.jobs_per_process = 3 (with both schemes per job) on the tiny config: the training
    jobs share processes (`train-jobs`), which write every run the separate jobs would."""
    cfg = [*OTHERS_OFF, 'train={"jobs_per_process": 3, "merge_schemes": true}']
    res = snakemake(tmp_path, "-n", configfile="config/tiny.yaml", config=cfg)
    assert res.returncode == 0, res.stderr[-2000:]
    procs = [k for k in job_counts(res.stdout) if k.startswith("train_") and "_with_" in k]
    assert procs and any("_centred_uncentred_" in k for k in procs)
    res = snakemake(tmp_path, "--cores", "2", *procs, configfile="config/tiny.yaml", config=cfg)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    tiny = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    root = tmp_path / tiny["results_dir"]
    for (s, d, m, seed), exps in expected_trials(tiny).items():
        tdir = root / "runs" / s / f"d{d}" / f"m{m}" / f"seed{seed}"
        assert len(list(tdir.glob("lam*.json"))) == len(exps), tdir
    logs = [(root / "logs" / "train" / f"{k}.log").read_text() for k in procs]
    assert all(text.count("runs ready under") >= 2 for text in logs)  # one line per job of the process


def test_only_short_jobs_join_the_bundling_group(tmp_path):
    """train.group with train.group_max_minutes: a training job joins the group exactly when its
    runtime estimate is at most the limit (a Slurm bundle runs its trials one after another and
    asks for their summed runtime, docs/cluster.md); the paper's config has jobs on both sides of
    300 minutes, and by default (60) none of its jobs is bundled."""
    def split(config):
        res = snakemake(tmp_path, "-n", configfile="config/paper.yaml", config=[config])
        assert res.returncode == 0, res.stderr[-2000:]
        runtime = {m.group(1): int(m.group(2)) for m in re.finditer(
            r"^\s*rule (train_\w+):\n(?:.*\n)*?\s*resources: .*?\bruntime=(\d+)", res.stdout, re.M)}
        grouped = set(re.findall(r"^    rule (train_\w+):", res.stdout, re.M))  # inside a "Group job" block
        assert grouped <= set(runtime) and len(runtime) == len(set(re.findall(r"rule (train_\w+):", res.stdout)))
        return runtime, grouped

    runtime, grouped = split("train={group: train, group_max_minutes: 300}")
    assert grouped and len(grouped) < len(runtime)
    assert grouped == {k for k, v in runtime.items() if v <= 300}, sorted((runtime[k], k) for k in grouped)[-3:]
    _, grouped = split("train={group: train}")
    assert not grouped


def test_named_targets_and_gpu_resource(tmp_path):
    counts, out = dry_run(tmp_path, "config/config.yaml", config=["train={device: cuda, group: trials}"])
    assert "gpu=1" in out
    res = snakemake(tmp_path, "-n", "fig1", "fig2", "fig7", "fig8", "fig9", "tables", config=OTHERS_OFF)
    assert res.returncode == 0, res.stderr[-2000:]
    fig2 = job_counts(snakemake(tmp_path, "-n", "fig2", config=OTHERS_OFF).stdout)
    assert fig2.get("fig_loss_curves") == 1 and "fig_angles" not in fig2 and "aggregate" not in fig2
    assert sum(1 for k in fig2 if k.startswith("train_")) == 1  # Fig 2 needs exactly its trial


def _keys(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield k
            yield from _keys(v)
    elif isinstance(node, list):
        for v in node:
            yield from _keys(v)


def test_a_snakemake_or_notebook_start_imports_neither_torch_nor_the_iri_checker():
    """Every Snakemake call (each job of a Slurm group job too) parses the Snakefile: the modules
    its rules files import must not load torch (~3 s here), and jsonschema must skip its IRI
    format checker (~3 s, workflow_config.skip_iri_format_checker), which is safe only while the
    schema uses no ``format`` keyword."""
    assert "format" not in set(_keys(load_schema(SCHEMA)))
    sources = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    imports = re.compile(r"^\s*from (shallowrelu[\w.]*) import", re.M)
    modules = sorted({m for p in sources for m in imports.findall(p.read_text())})
    assert "shallowrelu.workflow_config" in modules and len(modules) > 3, modules
    code = ("import sys; from shallowrelu.workflow_config import skip_iri_format_checker; skip_iri_format_checker(); "
            + "; ".join(f"import {m}" for m in modules)
            + "; import jsonschema, snakemake.utils; "
            "print(sorted(m for m in ('torch', 'rfc3987_syntax', 'matplotlib') if sys.modules.get(m) is not None))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[]"], out.stdout
    # the notebook rules' papermill (shallowrelu.notebook_job) starts without the IRI checker too
    pm = subprocess.run([sys.executable, "-X", "importtime", "-m", "shallowrelu.notebook_job", "--help"],
                        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert pm.returncode == 0 and pm.stdout.startswith("Usage: papermill"), pm.stdout[:500] + pm.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip() for line in pm.stderr.splitlines() if line.startswith("import time:")}
    assert {"papermill", "jsonschema"} <= loaded and "lark" not in loaded  # lark: rfc3987_syntax's parsers


def test_lint_clean(tmp_path):
    res = snakemake(tmp_path, "--lint")
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]


@pytest.mark.parametrize("override, message", [
    (["bogus=1"], "unknown config key 'bogus' in config; allowed keys there:"),
    (["train={max_iters: -5}"], "config key train.max_iters: got -5 (an integer); allowed: an integer >= 1"),
    (["grid={fig7: {schemes: [sideways], dims: [4], widths: [20]}}"],
     "config key grid.fig7.schemes[0]: got 'sideways' (a string); allowed: one of 'centred', 'uncentred'"),
    (["train={max_iters: abc}"], "config key train.max_iters: got 'abc' (a string); allowed: an integer >= 1"),
])
def test_bad_config_is_rejected_clearly(tmp_path, override, message):
    """One line naming the key and what is allowed, before any job (tests/test_config_errors.py checks
    every key of the schema in-process)."""
    res = snakemake(tmp_path, "-n", configfile="config/tiny.yaml", config=override)
    assert res.returncode != 0
    assert any(line.startswith(message) for line in (res.stdout + res.stderr).splitlines())
    assert "Building DAG" not in res.stdout + res.stderr and not (tmp_path / "results_tiny").exists()


def test_config_override_types_and_defaults():
    schema = load_schema(SCHEMA)
    cfg = {"train": {"max_iters": "1000", "resources": {"slurm_partition": "123"}, "group": "null"},
           "grid": {"seeds": ["0", "1"], "enabled": "false"}, "results_dir": "2024"}
    coerce_cli_strings(cfg, schema)
    assert cfg["train"]["max_iters"] == 1000 and cfg["grid"]["seeds"] == [0, 1]
    assert cfg["grid"]["enabled"] is False and cfg["train"]["group"] is None
    assert cfg["train"]["resources"]["slurm_partition"] == "123" and cfg["results_dir"] == "2024"
    with pytest.raises(ValueError, match="unknown config key 'x' in config.grid.fig7; allowed keys there: dims"):
        check_unknown_keys({"grid": {"fig7": {"x": 1}}}, schema)
    for part, allowed in (("table", "bs, dims, xis"), ("scan", "bs, dims, min_norm, xis")):  # through $ref / defs
        with pytest.raises(ValueError, match=f"'typo' in config.appendix_g.{part}; allowed keys there: {allowed}"):
            check_unknown_keys({"appendix_g": {part: {"dims": [3], "xis": [0.5], "bs": [4.0], "typo": 1}}}, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"appendix_g": {part: {"dims": [3], "xis": [0.5], "bs": [4.0], "typo": 1}}}, schema)
    jsonschema.validate({"appendix_g": {"scan": {"dims": [3], "xis": [0.5], "bs": [4.0], "min_norm": False}}}, schema)
    for path in ("config/config.yaml", "config/paper.yaml", "config/tiny.yaml"):
        check_unknown_keys(yaml.safe_load((REPO / path).read_text()), schema)


def test_cell_stats_and_reference():
    rows = []
    for seed, val in enumerate([1.0, 2.0, 4.0, np.nan]):
        rows.append(dict(scheme="centred", d=4, m=200, seed=seed, lambda_exp=-2, max_angle_deg=val,
                         mean_angle_deg=val / 2, nuclear_norm=1.0 + seed))
    runs = pd.DataFrame(rows)
    ref = load_reference(REPO / "data" / "reference_tables.csv")
    cells = cell_stats(runs, ref)
    assert list(cells.columns) == CELL_COLUMNS
    mx = cells[cells.metric == "max_angle_deg"].iloc[0]
    assert mx["n"] == 3 and mx["median"] == 2.0 and mx["min"] == 1.0 and mx["max"] == 4.0
    assert math.isclose(mx["std"], np.std([1.0, 2.0, 4.0]))
    assert mx["table"] == "1" and mx["figure"] == "7"
    paper = pd.read_csv(REPO / "data" / "reference_tables.csv")
    want = paper[(paper.table == 1) & (paper.d == 4) & (paper.lambda_exp == -2)]["median"].item()
    assert mx["paper_median"] == want
    nn = cells[cells.metric == "nuclear_norm"].iloc[0]
    assert nn["n"] == 4 and nn["median"] == 2.5
    # a cell in two paper tables (d = 1024, m = 200: Tables 1 and 7)
    both = ref[(ref.d == 1024) & (ref.m == 200) & (ref.metric == "max_angle_deg") & (ref.scheme == "centred")]
    assert set(both["table"]) == {"1;7"} and set(both["figure"]) == {"7;8"} and len(both) == 16
    # a cell the paper does not have
    other = cell_stats(runs.assign(d=5), ref)
    assert other["paper_median"].isna().all() and (other["table"] == "").all()


def test_reference_copy_matches_shared():
    shared = Path("/work/shared/paper/reference_tables.csv")
    if not shared.exists():
        pytest.skip("shared paper folder not present")
    assert (REPO / "data" / "reference_tables.csv").read_bytes() == shared.read_bytes()


@pytest.mark.parametrize("name", ["fig_angles", "fig_loss_curves"])
def test_notebooks_have_parameters_cell(name):
    """papermill needs a cell tagged 'parameters'; its defaults make the notebook run standalone."""
    nb = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text())
    tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1
    params: dict = {}
    exec("".join(tagged[0]["source"]), {}, params)
    assert params["figure"] in ("fig7", "fig2") and params["config_file"] is None and params["runs_dir"] is None
    assert not [c for c in nb["cells"] if c["cell_type"] == "code" and c.get("outputs")], "commit notebooks clean"


@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    from PIL import Image

    res = snakemake(tmp_path, "--cores", "2", configfile="config/tiny.yaml", config=OTHERS_OFF)
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    tiny = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    root = tmp_path / tiny["results_dir"]
    trials = expected_trials(tiny)
    n_runs = sum(map(len, trials.values()))

    # run files: trial.npz + one .json/.npz per λ
    for (s, d, m, seed), exps in trials.items():
        tdir = root / "runs" / s / f"d{d}" / f"m{m}" / f"seed{seed}"
        assert (tdir / "trial.npz").exists()
        assert len(list(tdir.glob("lam*.json"))) == len(exps) == len(list(tdir.glob("lam*.npz")))
        assert (root / "logs" / "train" / f"train_{s}_d{d}_m{m}_seed{seed}.log").exists()

    # tables
    runs = pd.read_csv(root / "tables" / "runs.csv")
    cells = pd.read_csv(root / "tables" / "cells.csv")
    assert list(runs.columns) == RUN_COLUMNS and len(runs) == n_runs
    assert (runs["iterations"] <= tiny["train"]["max_iters"]).all()
    assert list(cells.columns) == CELL_COLUMNS
    assert len(cells) == 3 * len({(s, d, m, e) for (s, d, m, _), ex in trials.items() for e in ex})
    for n in range(1, 13):
        tex = (root / "tables" / f"table{n}.tex").read_text()
        assert r"\begin{tabular}" in tex and f"Table {n}" in tex

    # figures: valid images with the expected axes; executed notebooks without errors
    expect_axes = {"fig1": 3, "fig7": 6, "fig8": 6, "fig2": 2, "fig9": 2}
    for fig, n_axes in expect_axes.items():
        png, pdf = root / "figures" / f"{fig}.png", root / "figures" / f"{fig}.pdf"
        with Image.open(png) as im:
            im.verify()
        with Image.open(png) as im:
            assert im.size[0] > 500 and im.size[1] > 200
        assert pdf.read_bytes()[:5] == b"%PDF-"
        axes = json.loads((root / "figures" / f"{fig}.axes.json").read_text())["axes"]
        assert len(axes) == n_axes
        if fig in ("fig2", "fig9"):
            assert axes[0]["xscale"] == "log" and axes[1]["xscale"] == "linear"
            assert axes[0]["yscale"] == axes[1]["yscale"] == "log"  # both losses on log-y, as in the paper
            assert "loss" in axes[0]["ylabel"] and "test loss" in axes[1]["ylabel"]
            assert axes[0]["n_lines"] == len(tiny["loss_curves"][fig]["lambda_exps"])
        else:
            assert all(a["xscale"] == "log" and a["yscale"] == "log" and "lambda" in a["xlabel"] for a in axes)
            assert [a["ylabel"].split(" ")[0] for a in axes[:3]] == ["max", "mean", "nuclear"]
            assert all(a["n_lines"] >= 1 for a in axes)
        nb_name = ("fig_loss_curves_" if fig in ("fig2", "fig9") else "fig_angles_") + fig + ".ipynb"
        nb = json.loads((root / "notebooks" / nb_name).read_text())
        assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
        injected = [c for c in nb["cells"] if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
        assert injected and f'figure = "{fig}"' in "".join(injected[0]["source"])
        assert (root / "logs" / "figures" / f"{fig}.log").exists()

    # nothing left to do; adding a seed plans only the new trials
    res = snakemake(tmp_path, "-n", configfile="config/tiny.yaml", config=OTHERS_OFF)
    assert "Nothing to be done" in res.stdout + res.stderr
    more = snakemake(tmp_path, "-n", configfile="config/tiny.yaml", config=[*OTHERS_OFF, "grid={seeds: [0, 1]}"])
    counts = job_counts(more.stdout + more.stderr)
    assert sorted(k for k in counts if k.startswith("train_")) == sorted(
        f"train_{s}_d{d}_m{m}_seed1" for s in ("centred", "uncentred") for d in (4,) for m in (10, 20))

    # the HTML report with every figure
    rep = snakemake(tmp_path, "--report", str(tmp_path / "report.html"), configfile="config/tiny.yaml",
                    config=OTHERS_OFF)
    assert rep.returncode == 0, (rep.stdout + rep.stderr)[-3000:]
    assert (tmp_path / "report.html").stat().st_size > 10_000
