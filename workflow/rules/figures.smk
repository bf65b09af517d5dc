# Figures 1, 7, 8 (angles and nuclear norm vs λ) and 2, 9 (loss curves): papermill notebooks.

GRID = config["grid"]
CURVES = config["loss_curves"]


def grid_runs(fig, suffixes=(".json",)):
    """Run files plotted in Fig 7 or 8 (all schemes × dims × widths × seeds × λ of the grid)."""
    g = GRID[fig]
    return [p for s in g["schemes"] for d in g["dims"] for m in g["widths"]
            for p in request_runs(s, d, m, GRID["seeds"], GRID["lambda_exps"], suffixes=suffixes)]


def curve_runs(fig, suffixes=(".json", ".npz")):
    c = CURVES[fig]
    return request_runs(c["scheme"], c["d"], c["m"], [c["seed"]], c["lambda_exps"], suffixes=suffixes)


FIG_RUNS = {}
if GRID["enabled"]:
    FIG_RUNS["fig7"] = grid_runs("fig7")
    FIG_RUNS["fig8"] = grid_runs("fig8")
if CURVES["enabled"]:
    FIG_RUNS["fig2"] = curve_runs("fig2")
    FIG_RUNS["fig9"] = curve_runs("fig9")
DEFAULT_TARGETS.extend(p for runs in FIG_RUNS.values() for p in runs)
