# Figures 1, 7, 8 (angles and nuclear norm vs λ) and 2, 9 (training and test loss vs
# iteration), each made by executing a papermill-parameterised notebook (the executed copy
# is kept in results/notebooks/). A figure's inputs are exactly the run files it plots.
# Helper functions: common.smk.

ANGLE_FIGS = ["fig1", "fig7", "fig8"] if GRID["enabled"] else []
CURVE_FIGS = ["fig2", "fig9"] if CURVES["enabled"] else []
FIG_RUNS = {fig: angle_fig_runs(fig) for fig in ANGLE_FIGS}
FIG_RUNS.update({fig: curve_fig_runs(fig) for fig in CURVE_FIGS})
DEFAULT_TARGETS.extend(f for fig in ANGLE_FIGS + CURVE_FIGS for f in figure_files(fig))


if ANGLE_FIGS:

    rule fig_angles:
        """Figs 1, 7, 8: max angle, mean angle and nuclear norm vs λ (medians, paper overlaid)."""
        input:
            runs=lambda wc: FIG_RUNS[wc.fig],
            reference=REFERENCE,
            notebook=f"{NOTEBOOK_SRC}/fig_angles.ipynb",
        output:
            pdf=report(f"{FIGURES}/{{fig}}.pdf", caption="../report/figure.rst", category="Figures",
                       labels={"figure": "{fig}", "format": "pdf"}),
            png=report(f"{FIGURES}/{{fig}}.png", caption="../report/figure.rst", category="Figures",
                       labels={"figure": "{fig}", "format": "png"}),
            axes=f"{FIGURES}/{{fig}}.axes.json",
            notebook=f"{NOTEBOOKS}/fig_angles_{{fig}}.ipynb",
        wildcard_constraints:
            fig="|".join(ANGLE_FIGS),
        params:
            pm=lambda wc, output: notebook_params(angle_figure_spec(config, wc.fig), output),
        log:
            f"{LOGS}/figures/{{fig}}.log",
        conda:
            "../../envs/analysis.yaml"
        shell:
            "python -m shallowrelu.notebook_job {input.notebook} {output.notebook} -p figure {wildcards.fig} -y '{params.pm}'"
            " --log-output > {log} 2>&1"


if CURVE_FIGS:

    rule fig_loss_curves:
        """Figs 2, 9: training loss (log-x) and test loss (linear-x) vs iteration, one curve per λ."""
        input:
            runs=lambda wc: FIG_RUNS[wc.fig],
            notebook=f"{NOTEBOOK_SRC}/fig_loss_curves.ipynb",
        output:
            pdf=report(f"{FIGURES}/{{fig}}.pdf", caption="../report/figure.rst", category="Figures",
                       labels={"figure": "{fig}", "format": "pdf"}),
            png=report(f"{FIGURES}/{{fig}}.png", caption="../report/figure.rst", category="Figures",
                       labels={"figure": "{fig}", "format": "png"}),
            axes=f"{FIGURES}/{{fig}}.axes.json",
            notebook=f"{NOTEBOOKS}/fig_loss_curves_{{fig}}.ipynb",
        wildcard_constraints:
            fig="|".join(CURVE_FIGS),
        params:
            pm=lambda wc, output: notebook_params(curve_figure_spec(config, wc.fig), output),
        log:
            f"{LOGS}/figures/{{fig}}.log",
        conda:
            "../../envs/analysis.yaml"
        shell:
            "python -m shallowrelu.notebook_job {input.notebook} {output.notebook} -p figure {wildcards.fig} -y '{params.pm}'"
            " --log-output > {log} 2>&1"


# Named targets: `snakemake fig7` etc. (only for the families that are enabled).
for _fig in ["fig1", "fig2", "fig7", "fig8", "fig9"]:
    if _fig in FIG_RUNS:

        rule:
            name:
                _fig
            input:
                figure_files(_fig),
