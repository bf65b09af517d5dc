# Example 31 (App. E; Figs 3-6) and Appendix I's two-teacher experiments (Figs 10, 11).
#
#   train_example31_*        the Example 31 run -> RUNS/example31/{scheme}/d../m../seed../lam..
#   train_two_teacher_*      the rho sweep, one job per (scheme, rho, seed group), the seeds of a
#                            job trained as one batch -> RUNS/two_teacher/rho{rho}/{scheme}/...
#   dynamics_example31       notebooks/dynamics_example31.ipynb -> figures fig3..fig6,
#                            tables/example31_crossings.csv, tables/example31.json
#   two_teacher_fig10/11     notebooks/two_teacher.ipynb, once per figure -> fig10 (+ tables
#                            two_teacher.csv, two_teacher_rho_summary.csv, two_teacher_breaks.json)
#                            and fig11 (+ tables/fig11_events.json)
#
# Named targets: example31 (= fig3 fig4 fig5 fig6 + tables), fig3..fig6, fig10, fig11. These
# runs have their own roots and iteration caps (dynamics.max_iters, two_teacher.max_iters), so
# they train in rules of their own rather than through common.smk's registry; the command is the
# same `python -m shallowrelu train`. Job lists come from shallowrelu.dynamics. Docs: docs/dynamics.md.

from shallowrelu.dynamics import example31_job, example31_stem, fig11_rho, two_teacher_jobs, two_teacher_stem

DYN = config.get("dynamics", {})
TT = config.get("two_teacher", {})
DYN_JOBS = []  # training jobs of this file, each with its iteration cap

# --- Example 31 -------------------------------------------------------------------------------
if DYN.get("enabled", False):
    DYN_ROOT = f"{RUNS}/example31"
    _ex31 = example31_job(DYN, DYN_ROOT)
    DYN_JOBS.append(dict(_ex31, max_iters=DYN.get("max_iters") or TRAIN["max_iters"],
                         loss_target=DYN.get("loss_target")))
    EX31_FIGS = [f for fig in ("fig3", "fig4", "fig5", "fig6") for f in figure_files(fig)]
    EX31_TABLES = [f"{TABLES}/example31_crossings.csv", f"{TABLES}/example31.json"]
    DEFAULT_TARGETS.extend(EX31_FIGS + EX31_TABLES)

    rule dynamics_example31:
        """Figs 3-6 of Example 31 and the automatic check of the zero-crossing order."""
        input:
            runs=_ex31["outputs"],
            notebook=f"{NOTEBOOK_SRC}/dynamics_example31.ipynb",
        output:
            figures=EX31_FIGS,
            tables=EX31_TABLES,
            notebook=f"{NOTEBOOKS}/dynamics_example31.ipynb",
        params:
            pm=as_json(dict(runs_dir=DYN_ROOT, figures_dir=FIGURES, tables_dir=TABLES, scheme=DYN["scheme"],
                            d=DYN["d"], m=DYN["m"], seed=DYN["seed"], lambda_exp=DYN["lambda_exp"],
                            arsinh_unit=DYN["arsinh_unit"], threshold_deg=DYN["threshold_deg"])),
        log:
            f"{LOGS}/dynamics/example31.log",
        conda:
            "../../envs/analysis.yaml"
        shell:
            "python -m shallowrelu.notebook_job {input.notebook} {output.notebook} -y '{params.pm}' --log-output > {log} 2>&1"

    for _fig in ("example31", "fig3", "fig4", "fig5", "fig6"):

        rule:
            name:
                _fig
            input:
                EX31_FIGS + EX31_TABLES if _fig == "example31" else figure_files(_fig),


# --- two teachers -----------------------------------------------------------------------------
if TT.get("enabled", False):
    _tt_jobs = two_teacher_jobs(TT, RUNS)
    _cap = TT.get("max_iters") or TRAIN["max_iters"]
    DYN_JOBS.extend(dict(j, max_iters=_cap) for j in _tt_jobs)
    _stem11 = two_teacher_stem(RUNS, TT["fig11"]["scheme"], fig11_rho(TT), TT["fig11"]["seed"], TT["d"], TT["m"],
                               TT["lambda_exp"])
    TT_INPUTS = {
        "fig10": [f for j in _tt_jobs for f in j["outputs"] if not f.endswith("trial.npz")],
        "fig11": [str(_stem11.with_suffix(".json")), str(_stem11.with_suffix(".npz"))],
    }
    TT_OUT = {
        "fig10": figure_files("fig10") + [f"{TABLES}/two_teacher.csv", f"{TABLES}/two_teacher_rho_summary.csv",
                                          f"{TABLES}/two_teacher_breaks.json"],
        "fig11": figure_files("fig11") + [f"{TABLES}/fig11_events.json"],
    }
    DEFAULT_TARGETS.extend(TT_OUT["fig10"] + TT_OUT["fig11"])
    TT_PM = dict(runs_dir=RUNS, figures_dir=FIGURES, tables_dir=TABLES, rhos=TT["rhos"], seeds=TT["seeds"],
                 d=TT["d"], m=TT["m"], lambda_exp=TT["lambda_exp"], threshold_deg=TT["threshold_deg"],
                 fig11=TT["fig11"])

    for _fig in ("fig10", "fig11"):

        rule:
            name:
                f"two_teacher_{_fig}"
            input:
                runs=TT_INPUTS[_fig],
                notebook=f"{NOTEBOOK_SRC}/two_teacher.ipynb",
            output:
                files=TT_OUT[_fig],
                notebook=f"{NOTEBOOKS}/two_teacher_{_fig}.ipynb",
            params:
                    pm=as_json(dict(TT_PM, figure=_fig)),
            log:
                f"{LOGS}/dynamics/two_teacher_{_fig}.log",
            conda:
                "../../envs/analysis.yaml"
            shell:
                "python -m shallowrelu.notebook_job {input.notebook} {output.notebook} -y '{params.pm}' --log-output > {log} 2>&1"

        rule:
            name:
                _fig
            input:
                TT_OUT[_fig],


# --- training jobs of this file (same command as train.smk, with this family's root and cap;
# train.jobs_per_process of them per process as there; a job alone keeps its own rule) ---
for _jobs in in_processes(DYN_JOBS, lambda j: j["d"] * j["n"] * j["m"] * len(j["seeds"]) * len(j["exps"]),
                          lambda j: j["d"]):
    if len(_jobs) == 1:
        _job = _jobs[0]
        _res = job_resources(_job)

        rule:
            name:
                _job["name"]
            output:
                _job["outputs"],
            log:
                f"{LOGS}/train/{_job['name']}.log",
            params:
                root=lambda wc, output: runs_root_of(output),
                scheme=_job["scheme"],
                d=_job["d"],
                m=_job["m"],
                seeds=" ".join(str(s) for s in _job["seeds"]),
                exps=" ".join(str(e) for e in _job["exps"]),
                rho="" if _job["rho"] is None else f"--rho {_job['rho']!r}",
                target="" if _job.get("loss_target") is None else f"--loss-target {_job['loss_target']!r}",
                max_iters=_job["max_iters"],
                n_log=TRAIN["n_log"],
                convention=TRAIN["loss_convention"],
                active_rule=TRAIN["active_rule"],
                device=job_device(_job["d"]),
                dtype=TRAIN["dtype"],
                checkpoint=TRAIN["checkpoint_every_s"],
            threads: TRAIN["threads"]
            resources:
                **_res,
            group:
                job_group(_res["runtime"])
            conda:
                "../../envs/train.yaml"
            shell:
                "python -m shallowrelu train --scheme {params.scheme} --d {params.d} --m {params.m}"
                " --seeds {params.seeds} --lambda-exps {params.exps} --out {params.root}"
                " --max-iters {params.max_iters} --n-log {params.n_log}"
                " --loss-convention {params.convention} --active-rule {params.active_rule}"
                " --device {params.device} --dtype {params.dtype}"
                " --checkpoint-every {params.checkpoint} --threads {threads} {params.rho} {params.target}"
                " > {log} 2>&1"
        continue
    _name = process_name([j["name"] for j in _jobs])
    _res = process_resources([job_resources(j) for j in _jobs])

    rule:
        name:
            _name
        output:
            [f for j in _jobs for f in j["outputs"]],
        log:
            f"{LOGS}/train/{_name}.log",
        params:
            command=train_jobs_command([train_args([j["scheme"]], j["d"], j["m"], j["seeds"], j["exps"],
                                              runs_root_of(j["outputs"]), j["rho"], j["max_iters"],
                                              j.get("loss_target")) for j in _jobs]),
        threads: TRAIN["threads"]
        resources:
            **_res,
        group:
            job_group(_res["runtime"])
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m shallowrelu {params.command} --threads {threads} > {log} 2>&1"
