"""``python -m shallowrelu dichotomy ACTION …``: Appendix G (Thm. 8) from the command line.

Actions:
  measure  M, its maximiser, the certificate and the convex minimum norm of one family member
           (JSON on stdout);
  table    the same for a grid of d, ξ (M < 0 family) and b (M > 0 family): CSV (+ LaTeX);
  sweep    train the shallow network on one family member for several λ = 4^e and write the
           final ‖θ‖², nuclear/spectral norm and effective rank per λ (CSV).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

COMMAND = "dichotomy"
ACTIONS = ("measure", "table", "sweep")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        COMMAND,
        help="Appendix G: minimum-norm vs minimum-rank interpolators (M, certificate, convex min norm, λ sweep)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("--family", choices=["negative", "positive"],
                   help="measure/sweep: 'negative' (Ex. 37, M < 0, parameter --xi) or 'positive' (M > 0, --b)")
    p.add_argument("--d", type=int, help="measure/sweep: dimension d = n (negative: >= 2, positive: >= 3)")
    p.add_argument("--xi", type=float, help="parameter ξ in (0, 1) of the negative family")
    p.add_argument("--b", type=float, help="parameter b > 0 of the positive family (the paper's proof needs b >= 11)")
    p.add_argument("--dims", type=int, nargs="+", default=[3, 4, 5, 6], help="table: dimensions (default 3 4 5 6)")
    p.add_argument("--xis", type=float, nargs="*", default=[0.1, 0.3, 0.5, 0.9], help="table: ξ values")
    p.add_argument("--bs", type=float, nargs="*", default=[4.0, 10.0, 11.0, 20.0, 40.0], help="table: b values")
    p.add_argument("--n-starts", type=int, default=8,
                   help="random starts per subset K in the search over p (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the search's starts (table/measure) or of the "
                   "initialisation (sweep)")
    p.add_argument("--no-min-norm", action="store_true", help="skip the convex minimum-norm computation")
    p.add_argument("--out-csv", type=Path, help="table/sweep: CSV file to write (with OUT.provenance.json beside it: "
                   "command, commit, versions, SHA-256 of the file)")
    p.add_argument("--out-tex", type=Path, help="table: LaTeX table to write (with its .provenance.json)")
    p.add_argument("--m", type=int, default=100, help="sweep: network width (default 100)")
    p.add_argument("--lambda-exps", nargs="+", default=["0..-8"], help="sweep: exponents e of λ = 4^e (default 0..-8)")
    p.add_argument("--loss-convention", choices=["paper", "authors"], default="paper",
                   help="sweep: loss convention (default 'paper': L = (1/2n)Σr²)")
    p.add_argument("--lr", type=float, default=None, help="sweep: learning rate (default: the convention's 0.01)")
    p.add_argument("--loss-target", type=float, default=1e-14,
                   help="sweep: stop when the objective is below this (default 1e-14: the M > 0 family is "
                        "ill-conditioned, so 1e-9 leaves ‖θ‖² off by ~1e-3)")
    p.add_argument("--max-iters", type=int, default=1_000_000, help="sweep: iteration cap (default 1e6)")
    p.add_argument("--n-log", type=int, default=100, help="sweep: logging points")
    p.add_argument("--no-normalise", action="store_true",
                   help="sweep: train on the raw data instead of rescaling to max ‖x_i‖ = 1 (all Appendix G "
                        "quantities are scale invariant; the raw M > 0 family needs a tiny learning rate)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _family_param(args: argparse.Namespace) -> float:
    if args.family is None or args.d is None:
        raise ValueError(f"'{args.action}' needs --family and --d")
    name, val = ("xi", args.xi) if args.family == "negative" else ("b", args.b)
    if val is None:
        raise ValueError(f"the {args.family} family needs --{name}")
    return float(val)


def _fmt(v: Any) -> Any:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (float, np.floating)):
        return "" if math.isnan(v) else repr(float(v))
    return v


def rows_to_csv(rows: Sequence[dict[str, Any]]) -> str:
    cols: list[str] = []
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _fmt(r.get(k, "")) for k in cols})
    return buf.getvalue()


def _num(v: Any, fmt: str) -> str:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return "--"
    return "--" if math.isnan(x) else format(x, fmt)


def rows_to_latex(rows: Sequence[dict[str, Any]]) -> str:
    """LaTeX table (booktabs) of :func:`shallowrelu.dichotomy.table_rows` output."""
    lines = [
        "% Appendix G: M, certificate and minimum norm (generated by python -m shallowrelu dichotomy table)",
        r"\begin{tabular}{llrrlcrrrrr}",
        r"\toprule",
        r"family & $d$ & $\xi$ / $b$ & $M$ & $K$ & suff. & cex $\xi$ & cex $\|\theta\|^2$ & "
        r"min $\|\theta\|^2$ & bound & neurons \\",
        r"\midrule",
    ]
    for r in rows:
        par = r["xi"] if r["family"] == "negative" else r["b"]
        lines.append(" & ".join([
            r["family"], str(r["d"]), _num(par, "g"), _num(r["M"], ".5f"),
            "\\{" + str(r["K"]).replace(" ", ",") + "\\}",
            "yes" if r["sufficient_condition"] else "no", _num(r.get("cex_xi"), ".4f"),
            _num(r.get("cex_theta_sq"), ".6f"), _num(r.get("min_norm"), ".6f"), _num(r["lower_bound"], ".4f"),
            str(r.get("min_norm_neurons", "--")),
        ]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from . import dichotomy as g
    from .io import write_with_provenance

    if args.n_starts < 0:
        raise ValueError(f"--n-starts must be >= 0, got {args.n_starts}")
    for path in (args.out_csv, args.out_tex):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    if args.action == "measure":
        ds = g.family_dataset(args.family, args.d, _family_param(args))
        row = g.analyse(ds, n_starts=args.n_starts, seed=args.seed, min_norm=not args.no_min_norm)
        print(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()},
                         default=float, indent=1))
        return 0
    if args.action == "table":
        for d in args.dims:
            if d < 2 or d > g.MAX_EXACT_D:
                raise ValueError(f"--dims must lie in 2..{g.MAX_EXACT_D}, got {d}")
        rows = g.table_rows(args.dims, args.xis, args.bs, n_starts=args.n_starts, seed=args.seed,
                            min_norm=not args.no_min_norm, progress=not args.quiet)
        if args.out_csv:
            write_with_provenance(args.out_csv, rows_to_csv(rows))
        if args.out_tex:
            write_with_provenance(args.out_tex, rows_to_latex(rows))
        if not args.out_csv:
            sys.stdout.write(rows_to_csv(rows))
        return 0
    # sweep
    import torch

    from .cli import parse_exps
    from .engine import TrainConfig

    ds = g.family_dataset(args.family, args.d, _family_param(args))
    if args.m < 1:
        raise ValueError(f"--m must be >= 1, got {args.m}")
    cfg = TrainConfig(loss_convention=args.loss_convention, lr=args.lr, loss_target=args.loss_target,
                      max_iters=args.max_iters, n_log=args.n_log, device="cpu").validate()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = g.implicit_bias_sweep(ds, parse_exps(args.lambda_exps), m=args.m, seed=args.seed,
                                 normalise=not args.no_normalise, cfg=cfg, progress=not args.quiet)
    mn = None if args.no_min_norm else g.analyse(ds, n_starts=args.n_starts, seed=0)
    for r in rows:
        r["lr"] = cfg.convention.lr
        r["loss_target"] = cfg.convention.target
        if mn is not None:
            r["M"] = mn["M"]
            r["min_norm"] = mn["min_norm"]
    text = rows_to_csv(rows)
    if args.out_csv:
        write_with_provenance(args.out_csv, text)
    else:
        sys.stdout.write(text)
    return 0
