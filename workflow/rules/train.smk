# One training job per trial (scheme, d, m, seed), or per train.seeds_per_job trials of the same
# (scheme, d, m, λ set) — with train.merge_schemes, of every scheme of the (d, m, λ set) — : all
# their runs train as one batch and the job writes every run's .json/.npz (docs/workflow.md says
# why a job is a trial). With train.jobs_per_process > 1, that many jobs share one process
# (`python -m shallowrelu train-jobs`: side by side in threads, on a GPU each on its own stream);
# a job alone keeps its own rule as before (the same params and command, so that existing
# results stay current). train.cpu_below_d moves the small-d jobs of a GPU run to the CPU cores
# (one trial per job and per process: common.smk on_cpu).
# Included last by the Snakefile, after every family has registered its runs (request_runs).


for _jobs in training_processes():
    if len(_jobs) == 1:
        _keys = _jobs[0]
        _root, _, _d, _m, _, _rho = _keys[0]
        _exps = sorted(TRIALS[_keys[0]], reverse=True)
        _res = trial_resources(_d, _m, len(_exps) * len(_keys), len(_keys))

        rule:
            name:
                job_name(_keys)
            output:
                [f for _key in _keys for f in trial_outputs(_key)],
            log:
                f"{LOGS}/train/{job_name(_keys)}.log",
            params:
                root=lambda wc, output: runs_root_of(output),
                scheme=" ".join(dict.fromkeys(k[1] for k in _keys)),
                d=_d,
                m=_m,
                seed=" ".join(str(s) for s in dict.fromkeys(k[4] for k in _keys)),
                exps=" ".join(str(e) for e in _exps),
                rho="" if _rho is None else f"--rho {_rho!r}",
                max_iters=TRAIN["max_iters"],
                n_log=TRAIN["n_log"],
                convention=TRAIN["loss_convention"],
                active_rule=TRAIN["active_rule"],
                dtype=TRAIN["dtype"],
                device=job_device(_d),
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
                " --seeds {params.seed} --lambda-exps {params.exps} --out {params.root}"
                " --max-iters {params.max_iters} --n-log {params.n_log}"
                " --loss-convention {params.convention} --active-rule {params.active_rule}"
                " --device {params.device} --dtype {params.dtype}"
                " --checkpoint-every {params.checkpoint} --threads {threads} {params.rho}"
                " > {log} 2>&1"
        continue
    _name = process_name([job_name(keys) for keys in _jobs])
    _res = process_resources([trial_resources(k[0][2], k[0][3], len(TRIALS[k[0]]) * len(k), len(k)) for k in _jobs])

    rule:
        name:
            _name
        output:
            [f for _keys in _jobs for _key in _keys for f in trial_outputs(_key)],
        log:
            f"{LOGS}/train/{_name}.log",
        params:
            command=train_jobs_command([registry_job_args(keys) for keys in _jobs]),
        threads: TRAIN["threads"]
        resources:
            **_res,
        group:
            job_group(_res["runtime"])
        conda:
            "../../envs/train.yaml"
        shell:
            "python -m shallowrelu {params.command} --threads {threads} > {log} 2>&1"
