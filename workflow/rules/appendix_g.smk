# Appendix G (Sec. 7, Thm. 8, Ex. 37; SPEC §5): minimum-norm versus minimum-rank interpolators.
#
#   appendix_g_table     M, maximising K, certificate and convex minimum ‖θ‖² for d × (ξ, b)
#                        -> tables/appendix_g.csv, .tex
#   appendix_g_scan      M (and the minimum norm) across the families' parameters
#                        -> tables/appendix_g_scan.csv
#   appendix_g_sweep     train on one family member for λ = 4^e (one job per dataset)
#                        -> tables/appendix_g_sweep_{name}.csv
#   (each table with TABLE.provenance.json beside it: command, commit, versions, SHA-256; io.py)
#   appendix_g_notebook  figures (papermill notebooks/appendix_g.ipynb)
#                        -> figures/appendix_g_training.*, figures/appendix_g_M_scan.*
#
# Named target: `snakemake --cores 2 appendix_g`. CLI behind the rules: python -m shallowrelu
# dichotomy (docs/appendix_g.md).

APPG = config.get("appendix_g", {})
APPG_PROVENANCE = []  # the tables' provenance records (paper.smk renders them for the document)

if APPG.get("enabled", False):
    APPG_TABLE = {"csv": f"{TABLES}/appendix_g.csv", "tex": f"{TABLES}/appendix_g.tex"}
    APPG_SCAN = f"{TABLES}/appendix_g_scan.csv"
    APPG_SWEEPS = {name: f"{TABLES}/appendix_g_sweep_{name}.csv" for name in APPG["sweep"]["datasets"]}
    APPG_FIG_STEMS = {name: f"{FIGURES}/appendix_g_{name}" for name in ("training", "M_scan")}
    APPG_FIGS = [f"{stem}.{ext}" for stem in APPG_FIG_STEMS.values() for ext in ("pdf", "png", "axes.json")]
    APPG_NOTEBOOK = f"{NOTEBOOKS}/appendix_g.ipynb"
    APPG_TARGETS = list(APPG_TABLE.values()) + [APPG_SCAN] + list(APPG_SWEEPS.values()) + APPG_FIGS + [APPG_NOTEBOOK]
    DEFAULT_TARGETS.extend(APPG_TARGETS)
    APPG_PROVENANCE = [provenance_file(f) for f in [*APPG_TABLE.values(), APPG_SCAN, *APPG_SWEEPS.values()]]


    rule appendix_g_table:
        """Table of M, the certificate and the convex minimum norm (Thm. 8) for d × ξ × b."""
        output:
            csv=report(APPG_TABLE["csv"], category="Appendix G"),
            tex=APPG_TABLE["tex"],
            provenance=[provenance_file(f) for f in APPG_TABLE.values()],
        params:
            src=SRC,
            dims=" ".join(str(int(d)) for d in APPG["table"]["dims"]),
            xis=appg_list(APPG["table"]["xis"]),
            bs=appg_list(APPG["table"]["bs"]),
            n_starts=APPG["n_starts"],
        log:
            f"{LOGS}/appendix_g/table.log",
        conda:
            "../../envs/analysis.yaml"
        shell:
            "export PYTHONPATH={params.src}${{PYTHONPATH:+:$PYTHONPATH}};"
            " python -m shallowrelu dichotomy table --dims {params.dims} --xis {params.xis} --bs {params.bs}"
            " --n-starts {params.n_starts} --out-csv {output.csv} --out-tex {output.tex} > {log} 2>&1"

    rule appendix_g_scan:
        """M and the minimum norm across the families' parameters (where does the sign flip?)."""
        output:
            csv=APPG_SCAN,
            provenance=provenance_file(APPG_SCAN),
        params:
            src=SRC,
            dims=" ".join(str(int(d)) for d in APPG["scan"]["dims"]),
            xis=appg_list(APPG["scan"]["xis"]),
            bs=appg_list(APPG["scan"]["bs"]),
            n_starts=APPG["n_starts"],
            min_norm="" if APPG["scan"]["min_norm"] else "--no-min-norm",
        log:
            f"{LOGS}/appendix_g/scan.log",
        conda:
            "../../envs/analysis.yaml"
        shell:
            "export PYTHONPATH={params.src}${{PYTHONPATH:+:$PYTHONPATH}};"
            " python -m shallowrelu dichotomy table --dims {params.dims} --xis {params.xis} --bs {params.bs}"
            " --n-starts {params.n_starts} {params.min_norm} --out-csv {output.csv} > {log} 2>&1"

    rule appendix_g_sweep:
        """Implicit bias (Thm. 7): train from λ = 4^e on one dataset, final ‖θ‖² and effective rank."""
        output:
            csv=f"{TABLES}/appendix_g_sweep_{{name}}.csv",
            provenance=provenance_file(f"{TABLES}/appendix_g_sweep_{{name}}.csv"),
        wildcard_constraints:
            name="|".join(APPG_SWEEPS),
        params:
            src=SRC,
            args=lambda wc: appg_sweep_args(wc.name),
        threads: 1
        log:
            f"{LOGS}/appendix_g/sweep_{{name}}.log",
        conda:
            "../../envs/train.yaml"
        shell:
            "export PYTHONPATH={params.src}${{PYTHONPATH:+:$PYTHONPATH}};"
            " python -m shallowrelu dichotomy sweep {params.args} --no-min-norm --threads {threads}"
            " --out-csv {output.csv} > {log} 2>&1"

    rule appendix_g_notebook:
        """Figures: ‖θ‖² and effective rank vs λ (min norm and 2 as reference lines); M across parameters."""
        input:
            table=APPG_TABLE["csv"],
            scan=APPG_SCAN,
            sweeps=list(APPG_SWEEPS.values()),
            notebook=f"{NOTEBOOK_SRC}/appendix_g.ipynb",
        output:
            figs=[report(f, category="Appendix G") if f.endswith(".png") else f for f in APPG_FIGS],
            notebook=APPG_NOTEBOOK,
        params:
            src=SRC,
            pm=lambda wc, input: as_json({
                "table_csv": input.table, "scan_csv": input.scan, "sweep_csvs": list(input.sweeps),
                "training_stem": APPG_FIG_STEMS["training"], "scan_stem": APPG_FIG_STEMS["M_scan"],
            }),
        log:
            f"{LOGS}/appendix_g/notebook.log",
        conda:
            "../../envs/analysis.yaml"
        shell:
            "export PYTHONPATH={params.src}${{PYTHONPATH:+:$PYTHONPATH}};"
            " python -m shallowrelu.notebook_job {input.notebook} {output.notebook} -y '{params.pm}' --log-output > {log} 2>&1"

    rule appendix_g:
        """Named target: `snakemake appendix_g`."""
        input:
            APPG_TARGETS,
