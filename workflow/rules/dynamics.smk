# Example 31 (App. E; Figs 3-6) and Appendix I's two-teacher experiments (Figs 10, 11).
#
#   train_example31_*        the Example 31 run -> RUNS/example31/{scheme}/d../m../seed../lam..
#   train_two_teacher_*      the rho sweep, one job per (scheme, rho, seed group), all seeds of a
#                            job trained as one batch -> RUNS/two_teacher/rho{rho}/{scheme}/...
#   dynamics_example31       notebooks/dynamics_example31.ipynb -> figures fig3..fig6,
#                            tables/example31_crossings.csv, tables/example31.json
#   two_teacher_figure       notebooks/two_teacher.ipynb, once per figure -> fig10 (+ tables
#                            two_teacher.csv, two_teacher_rho_summary.csv, two_teacher_breaks.json)
#                            and fig11 (+ tables/fig11_events.json)
#
# Named targets: example31 (= fig3 fig4 fig5 fig6), fig10, fig11. These runs have their own roots
# and caps (dynamics.max_iters, two_teacher.max_iters), so they train in their own rules rather
# than through the registry of common.smk; the command is the same `python -m shallowrelu train`.
# Docs: docs/dynamics.md.

from shallowrelu.datasets import DEFAULT_RHO as _DEFAULT_RHO
from shallowrelu.dynamics import example31_stem, rho_tag, scheme_rhos, two_teacher_root, two_teacher_stem
from shallowrelu.io import trial_dir as _trial_dir

DYN = config.get("dynamics", {})
TT = config.get("two_teacher", {})
DYN_ROOT = f"{RUNS}/example31"
DYN_JOBS = []  # training jobs of this file: dicts with name, root, scheme, d, m, seeds, exps, rho, max_iters


def _dyn_job(name, root, scheme, d, m, seeds, exps, rho, max_iters, n):
    slug = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    outputs = []
    for seed in seeds:
        outputs.append(str(_trial_dir(root, scheme, d, m, seed) / "trial.npz"))
        for e in exps:
            stem = str(run_stem(root, scheme, d, m, seed, e))
            outputs += [stem + ".json", stem + ".npz"]
    DYN_JOBS.append(dict(name=slug, root=str(root), scheme=scheme, d=int(d), m=int(m), seeds=list(seeds),
                         exps=list(exps), rho=rho, max_iters=int(max_iters), n=int(n), outputs=outputs))
    return outputs


def _cap(section):
    return section.get("max_iters") or TRAIN["max_iters"]


def _files(stem):
    return [f"{stem}.pdf", f"{stem}.png", f"{stem}.axes.json"]


# --- Example 31 -------------------------------------------------------------------------------
if DYN.get("enabled", False):
    EX31_STEM = str(example31_stem(DYN_ROOT, DYN["seed"], DYN["scheme"], DYN["d"], DYN["m"], DYN["lambda_exp"]))
    EX31_RUN = _dyn_job(f"train_example31_{DYN['scheme']}_d{DYN['d']}_m{DYN['m']}_seed{DYN['seed']}", DYN_ROOT,
                        DYN["scheme"], DYN["d"], DYN["m"], [DYN["seed"]], [DYN["lambda_exp"]], None, _cap(DYN), DYN["d"])
    EX31_FIGS = [f for fig in ("fig3", "fig4", "fig5", "fig6") for f in _files(f"{FIGURES}/{fig}")]
    EX31_TABLES = [f"{TABLES}/example31_crossings.csv", f"{TABLES}/example31.json"]
    DEFAULT_TARGETS.extend(EX31_FIGS + EX31_TABLES)

    rule dynamics_example31:
        """Figs 3-6 of Example 31 and the automatic check of the zero-crossing order."""
        input:
            runs=EX31_RUN,
            notebook=f"{NOTEBOOK_SRC}/dynamics_example31.ipynb",
        output:
            figures=EX31_FIGS,
            tables=EX31_TABLES,
            notebook=f"{NOTEBOOKS}/dynamics_example31.ipynb",
        params:
            src=SRC,
            pm=as_json(dict(runs_dir=DYN_ROOT, figures_dir=FIGURES, tables_dir=TABLES, scheme=DYN["scheme"],
                            d=DYN["d"], m=DYN["m"], seed=DYN["seed"], lambda_exp=DYN["lambda_exp"],
                            arsinh_unit=DYN["arsinh_unit"], threshold_deg=DYN["threshold_deg"])),
        log:
            f"{LOGS}/dynamics/example31.log",
        conda:
            "../../envs/analysis.yaml"
        shell:
            "export PYTHONPATH={params.src}${{PYTHONPATH:+:$PYTHONPATH}};"
            " papermill {input.notebook} {output.notebook} -y '{params.pm}' --log-output > {log} 2>&1"

    for _fig in ("example31", "fig3", "fig4", "fig5", "fig6"):

        rule:
            name:
                _fig
            input:
                EX31_FIGS + EX31_TABLES if _fig == "example31" else _files(f"{FIGURES}/{_fig}"),


# --- two teachers -----------------------------------------------------------------------------
if TT.get("enabled", False):
    TT_RHOS = scheme_rhos(list(TT["rhos"]), TT["rhos"])
    _f11 = TT["fig11"]
    TT_F11_RHO = _DEFAULT_RHO[_f11["scheme"]] if _f11["rho"] == "own" else float(_f11["rho"])
    _lam = TT["lambda_exp"]
    _jobs = {}  # (scheme, rho tag) -> (rho, seeds)
    for _scheme, _rhos in TT_RHOS.items():
        for _rho in _rhos:
            _jobs[(_scheme, rho_tag(_rho))] = (_rho, list(TT["seeds"]))
    _key11 = (_f11["scheme"], rho_tag(TT_F11_RHO))
    _rho11, _seeds11 = _jobs.get(_key11, (TT_F11_RHO, []))
    if _f11["seed"] not in _seeds11:
        _jobs[_key11] = (_rho11, _seeds11 + [_f11["seed"]])
    TT_RUNS = []
    for (_scheme, _tag), (_rho, _seeds) in sorted(_jobs.items()):
        _chunk = TT["seeds_per_job"]
        for _i in range(0, len(_seeds), _chunk):
            _group = _seeds[_i:_i + _chunk]
            TT_RUNS += _dyn_job(f"train_two_teacher_{_scheme.removeprefix('two-teacher-')}_rho{_tag}_seeds{_group[0]}_{_group[-1]}",
                                two_teacher_root(RUNS, _rho), _scheme, TT["d"], TT["m"], _group, [_lam], _rho,
                                _cap(TT), 2 * TT["d"])
    TT_STEM11 = str(two_teacher_stem(RUNS, _f11["scheme"], TT_F11_RHO, _f11["seed"], TT["d"], TT["m"], _lam))
    TT_OUT = {
        "fig10": _files(f"{FIGURES}/fig10") + [f"{TABLES}/two_teacher.csv", f"{TABLES}/two_teacher_rho_summary.csv",
                                               f"{TABLES}/two_teacher_breaks.json"],
        "fig11": _files(f"{FIGURES}/fig11") + [f"{TABLES}/fig11_events.json"],
    }
    DEFAULT_TARGETS.extend(TT_OUT["fig10"] + TT_OUT["fig11"])

    TT_INPUTS = {"fig10": [f for f in TT_RUNS if not f.endswith("trial.npz")],
                 "fig11": [TT_STEM11 + ".json", TT_STEM11 + ".npz"]}
    TT_PM = dict(runs_dir=RUNS, figures_dir=FIGURES, tables_dir=TABLES, rhos=TT["rhos"], seeds=TT["seeds"],
                 d=TT["d"], m=TT["m"], lambda_exp=_lam, threshold_deg=TT["threshold_deg"], fig11=_f11)

    for _fig in ("fig10", "fig11"):

        rule:
            """Fig 10 (max angles within J+ and J- against rho) or Fig 11 (one run's loss and angles)."""
            name:
                f"two_teacher_{_fig}"
            input:
                runs=TT_INPUTS[_fig],
                notebook=f"{NOTEBOOK_SRC}/two_teacher.ipynb",
            output:
                files=TT_OUT[_fig],
                notebook=f"{NOTEBOOKS}/two_teacher_{_fig}.ipynb",
            params:
                src=SRC,
                pm=as_json(dict(TT_PM, figure=_fig)),
            log:
                f"{LOGS}/dynamics/two_teacher_{_fig}.log",
            conda:
                "../../envs/analysis.yaml"
            shell:
                "export PYTHONPATH={params.src}${{PYTHONPATH:+:$PYTHONPATH}};"
                " papermill {input.notebook} {output.notebook} -y '{params.pm}' --log-output > {log} 2>&1"

        rule:
            name:
                _fig
            input:
                TT_OUT[_fig],


# --- training jobs of this file (same command as train.smk, with this family's root and cap) ---
for _job in DYN_JOBS:
    _res = dict(trial_resources(_job["d"], _job["m"], len(_job["seeds"])),
                runtime=trial_runtime_minutes(_job["d"], _job["m"], len(_job["seeds"]), _job["max_iters"], n=_job["n"]))

    rule:
        name:
            _job["name"]
        output:
            _job["outputs"],
        log:
            f"{LOGS}/train/{_job['name']}.log",
        params:
            src=SRC,
            scheme=_job["scheme"],
            d=_job["d"],
            m=_job["m"],
            seeds=" ".join(str(s) for s in _job["seeds"]),
            exps=" ".join(str(e) for e in _job["exps"]),
            root=lambda wc, output: runs_root_of(output),
            rho="" if _job["rho"] is None else f"--rho {_job['rho']!r}",
            max_iters=_job["max_iters"],
            n_log=TRAIN["n_log"],
            convention=TRAIN["loss_convention"],
            active_rule=TRAIN["active_rule"],
            device=TRAIN["device"],
            dtype=TRAIN["dtype"],
            checkpoint=TRAIN["checkpoint_every_s"],
        threads: TRAIN["threads"]
        resources:
            **_res,
        group:
            TRAIN["group"]
        conda:
            "../../envs/train.yaml"
        shell:
            "export PYTHONPATH={params.src}${{PYTHONPATH:+:$PYTHONPATH}}; python -m shallowrelu train"
            " --scheme {params.scheme} --d {params.d} --m {params.m}"
            " --seeds {params.seeds} --lambda-exps {params.exps} --out {params.root}"
            " --max-iters {params.max_iters} --n-log {params.n_log}"
            " --loss-convention {params.convention} --active-rule {params.active_rule}"
            " --device {params.device} --dtype {params.dtype}"
            " --checkpoint-every {params.checkpoint} --threads {threads} {params.rho}"
            " > {log} 2>&1"
