# One training job per trial (scheme, d, m, seed): all its λ values train as one batch.
# Included last by the Snakefile so every family has registered its runs (request_runs).


for _key in sorted(TRIALS, key=lambda k: (k[0], k[1], k[2], k[3], k[4])):
    _root, _scheme, _d, _m, _seed, _rho = _key
    _exps = sorted(TRIALS[_key], reverse=True)
    _res = {"mem_mb": trial_mem_mb(_d, _m, len(_exps)),
            "runtime": trial_runtime_minutes(_d, _m, len(_exps), TRAIN["max_iters"])}
    if TRAIN["resources"]["slurm_partition"]:
        _res["slurm_partition"] = TRAIN["resources"]["slurm_partition"]
    if uses_gpu():
        _res["gpu"] = 1

    rule:
        name:
            trial_name(_key)
        output:
            trial_outputs(_key),
        log:
            f"{LOGS}/train/{trial_name(_key)}.log",
        params:
            scheme=_scheme,
            d=_d,
            m=_m,
            seed=_seed,
            exps=" ".join(str(e) for e in _exps),
            root=_root,
            rho="" if _rho is None else f"--rho {_rho!r}",
            max_iters=TRAIN["max_iters"],
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
            "python -m shallowrelu train --scheme {params.scheme} --d {params.d} --m {params.m}"
            " --seeds {params.seed} --lambda-exps {params.exps} --out {params.root}"
            " --max-iters {params.max_iters} --n-log {params.n_log}"
            " --loss-convention {params.convention} --active-rule {params.active_rule}"
            " --device {params.device} --dtype {params.dtype}"
            " --checkpoint-every {params.checkpoint} --threads {threads} {params.rho}"
            " > {log} 2>&1"
