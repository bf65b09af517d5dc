# One training job per trial (scheme, d, m, seed): all its λ values train as one batch and
# the job writes every run's .json/.npz (docs/workflow.md says why a job is a trial).
# Included last by the Snakefile, after every family has registered its runs (request_runs).


for _key in sorted(TRIALS, key=lambda k: k[:5]):
    _root, _scheme, _d, _m, _seed, _rho = _key
    _exps = sorted(TRIALS[_key], reverse=True)

    rule:
        name:
            trial_name(_key)
        output:
            trial_outputs(_key),
        log:
            f"{LOGS}/train/{trial_name(_key)}.log",
        params:
            root=lambda wc, output: runs_root_of(output),
            scheme=_scheme,
            d=_d,
            m=_m,
            seed=_seed,
            exps=" ".join(str(e) for e in _exps),
            rho="" if _rho is None else f"--rho {_rho!r}",
            max_iters=TRAIN["max_iters"],
            n_log=TRAIN["n_log"],
            convention=TRAIN["loss_convention"],
            active_rule=TRAIN["active_rule"],
            dtype=TRAIN["dtype"],
            device=TRAIN["device"],
            checkpoint=TRAIN["checkpoint_every_s"],
        threads: TRAIN["threads"]
        resources:
            **trial_resources(_d, _m, len(_exps)),
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
