"""Command line: ``python -m shallowrelu train …`` (see ``--help`` of each command)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .datasets import SCHEMES, check_scheme, check_sizes
from .engine import ACTIVE_RULES, TrainConfig, resolve_device
from .io import check_writable_dir
from .model import LOSS_CONVENTIONS


def parse_exps(tokens: Sequence[str]) -> list[int]:
    """λ exponents from tokens like ``2..-13`` (inclusive, either direction), ``-3`` or ``0,1``."""
    out: list[int] = []
    for tok in tokens:
        for part in str(tok).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                if ".." in part:
                    lo, hi = (int(x) for x in part.split(".."))
                    step = 1 if hi >= lo else -1
                    out.extend(range(lo, hi + step, step))
                else:
                    out.append(int(part))
            except ValueError:
                raise ValueError(f"bad λ exponent {part!r}; use integers or ranges like 2..-13") from None
    if not out:
        raise ValueError("no λ exponents given")
    return out


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train the runs of one (scheme, d, m) for several seeds and λ = 4^e",
        description="Train all (seed, λ) runs of one scheme, dimension and width as one batched "
        "computation and write one .npz + .json per run (and trial.npz per seed) under --out.",
    )
    _train_arguments(p)
    j = sub.add_parser(
        "train-jobs",
        help="several train jobs in one process, side by side",
        description="Run several `train` jobs at once in one process, one thread each (on a GPU each "
        "on its own CUDA stream, so that the small jobs' kernels run side by side instead of taking "
        "turns as separate processes do). Every job is checked before any starts; SIGTERM or Ctrl-C "
        "makes every job write its checkpoint and stop (rerun the same command to resume).",
    )
    j.add_argument("--job", action="append", required=True, metavar="ARGS",
                   help="the arguments of one train command, quoted, e.g. \"--scheme centred uncentred --d 16 "
                        "--m 200 --seeds 0 1 2 3 4 --lambda-exps 2..-13 --out results/runs --device cuda\" "
                        "(repeat --job for each; all on one device)")
    j.add_argument("--threads", type=int, default=None, help="torch CPU threads of the process")


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheme", required=True, nargs="+",
                   help=f"dataset scheme: {', '.join(SCHEMES)}; several (distinct) train as one batch, each "
                        "scheme's runs written as in a job of its own (e.g. both schemes of a grid cell on a GPU)")
    p.add_argument("--d", type=int, required=True, help="input dimension d (>= 2); the dataset has n = d points")
    p.add_argument("--m", type=int, required=True, help="network width m (>= 1)")
    p.add_argument("--seeds", type=int, nargs="+", required=True, help="trial seeds (>= 0)")
    p.add_argument("--lambda-exps", nargs="+", required=True,
                   help="exponents e of λ = 4^e, e.g. '2..-13' (16 values) or '-2 -4 -6'")
    p.add_argument("--out", required=True, type=Path, help="results root directory")
    p.add_argument("--rho", type=float, default=None, help="noise multiplier ρ (default: the scheme's own)")
    p.add_argument("--loss-convention", choices=sorted(LOSS_CONVENTIONS), default="authors",
                   help="'authors' (default): minimise mean r² with lr 0.01, stop when < 1e-9 (reproduces "
                        "the published tables); 'paper': minimise (1/2n)Σr² with lr 0.01, stop when < 1e-9")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the convention's, 0.01)")
    p.add_argument("--loss-target", type=float, default=None, help="stop below this objective (default 1e-9)")
    p.add_argument("--max-iters", type=int, default=20_000_000, help="iteration cap (default 2e7, the paper's)")
    p.add_argument("--n-log", type=int, default=1000, help="number of geometrically spaced logging points")
    p.add_argument("--active-rule", choices=ACTIVE_RULES, default="init",
                   help="neuron groups for the headline angles: 'init' (J+ fixed at initialisation, the "
                        "paper's) or 'end' (re-evaluated at the end); both are always stored")
    p.add_argument("--device", default="auto", help="'auto' (CUDA if available), 'cpu', 'cuda' or 'cuda:N'")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                   help="floating point type (float64 needed for the paper's small angles)")
    p.add_argument("--checkpoint-every", type=float, default=300.0, metavar="SECONDS",
                   help="write a resumable checkpoint at most this often (default 300 s)")
    p.add_argument("--engine", choices=["fast", "reference"], default="fast",
                   help="steppers: 'fast' (default; dead neurons leave the step, shared products, CUDA "
                        "graphs; on the CPU compiled numba loops, or the torch step with the environment "
                        "variable SHALLOWRELU_KERNELS=torch) or 'reference' (the plain batched step); both "
                        "compute the same iterates (docs/performance.md)")
    p.add_argument("--stable-phase", choices=["auto", "on", "off"], default="auto",
                   help="fast engine: the grouped stepper, certified activation-pattern groups with one "
                        "gradient direction each (docs/performance.md); 'auto' (default) = on for the CPU, "
                        "off on CUDA (not yet measured there). With it, runs whose live neurons are all "
                        "active on every point step in X's singular basis (steppers/spectral.py; environment "
                        "variable SHALLOWRELU_SPECTRAL=auto|on|off, auto: on the CPU)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--force", action="store_true", help="retrain runs whose results already exist")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _checked_job(args: argparse.Namespace) -> tuple[TrainConfig, list[int]]:
    """The settings of one train job, every value checked before any work."""
    for scheme in args.scheme:
        check_scheme(scheme)
    if len(set(args.scheme)) != len(args.scheme):
        raise ValueError(f"--scheme values must be distinct, got {' '.join(args.scheme)}")
    check_sizes(args.d, args.m)
    for s in args.seeds:
        if s < 0:
            raise ValueError(f"seed must be >= 0, got {s}")
    exps = parse_exps(args.lambda_exps)
    if args.rho is not None and not args.rho > 0:
        raise ValueError(f"noise multiplier rho must be > 0, got {args.rho}")
    cfg = TrainConfig(loss_convention=args.loss_convention, lr=args.lr, loss_target=args.loss_target,
                      max_iters=args.max_iters, n_log=args.n_log, device=args.device, dtype=args.dtype,
                      active_rule=args.active_rule, checkpoint_every_s=args.checkpoint_every,
                      engine=args.engine, stable_phase=args.stable_phase).validate()
    return cfg, exps


def _train_job(args: argparse.Namespace, cfg: TrainConfig, exps: list[int]) -> None:
    from .runs import train_trials

    stems = train_trials(args.out, args.scheme, args.d, args.m, args.seeds, exps, cfg, rho=args.rho,
                         progress=not args.quiet, force=args.force)
    if not args.quiet:
        print(f"{len(stems)} runs ready under {args.out}", file=sys.stderr)


def _cmd_train(args: argparse.Namespace) -> int:
    import torch

    cfg, exps = _checked_job(args)
    check_writable_dir(args.out)
    if args.threads:
        torch.set_num_threads(args.threads)
    _train_job(args, cfg, exps)
    return 0


def _cmd_train_jobs(args: argparse.Namespace) -> int:
    import shlex

    import torch

    from .runs import train_jobs_concurrently

    parser = argparse.ArgumentParser(prog="python -m shallowrelu train-jobs --job", add_help=False)
    _train_arguments(parser)
    jobs, seen = [], {}
    for text in args.job:
        try:
            job = parser.parse_args(shlex.split(text))
        except SystemExit:  # argparse named the problem on stderr
            raise ValueError(f"bad --job {text!r}") from None
        if job.threads is not None:
            raise ValueError(f"--threads belongs to train-jobs, not to a job: {text!r}")
        for sc in job.scheme:  # no two jobs may write the same runs
            for seed in job.seeds:
                trial = (str(Path(job.out).resolve()), sc, job.d, job.m, seed)
                if trial in seen:
                    raise ValueError(f"the jobs {seen[trial]!r} and {text!r} both train {sc} d={job.d} "
                                     f"m={job.m} seed={seed} under {job.out}")
                seen[trial] = text
        try:
            jobs.append((job, *_checked_job(job)))
        except ValueError as exc:
            raise ValueError(f"--job {text!r}: {exc}") from None
    def device_of(cfg: TrainConfig) -> str:  # 'cuda' is the current CUDA device, as for torch
        dev = resolve_device(cfg.device)
        return f"cuda:{torch.cuda.current_device()}" if dev.type == "cuda" and dev.index is None else str(dev)

    devices = {device_of(cfg) for _, cfg, _ in jobs}
    if len(devices) > 1:
        raise ValueError(f"the jobs of one process share one device, got {sorted(devices)}")
    for job, _, _ in jobs:
        check_writable_dir(job.out)
    if args.threads:
        torch.set_num_threads(args.threads)
    train_jobs_concurrently([lambda j=j: _train_job(*j) for j in jobs], devices.pop())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m shallowrelu",
        description="Reproduce Chistikov, Englert & Lazić (NeurIPS 2023): train shallow ReLU networks "
        "on a teacher neuron and measure alignment and implicit bias.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train(sub)
    return parser


COMMANDS = {"train": _cmd_train, "train-jobs": _cmd_train_jobs}

# Modules that add subcommands: each defines ``add_parser(subparsers)`` (registering one
# subcommand whose name is its ``COMMAND`` attribute) and ``run(args) -> int``.
SUBCOMMAND_MODULES: list[str] = ["shallowrelu.appendix_g_cli", "shallowrelu.report", "shallowrelu.bench"]


def main(argv: Sequence[str] | None = None) -> int:
    import importlib

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for modname in SUBCOMMAND_MODULES:
        mod = importlib.import_module(modname)
        mod.add_parser(sub)
        COMMANDS[mod.COMMAND] = mod.run
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, OSError) as exc:  # bad input, or a file that cannot be written (a full disk)
        parser.exit(2, f"{parser.prog} {args.command}: error: {exc}\n")
    return 1
