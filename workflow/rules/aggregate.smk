# Aggregation: every run of the main store -> results/tables/runs.csv, cells.csv (with the
# paper's values alongside) and one LaTeX table per paper table (Tables 1-12).
# Helper functions: common.smk.

TABLE_FILES = [f"{TABLES}/runs.csv", f"{TABLES}/cells.csv"] + table_files()
DEFAULT_TARGETS.extend(TABLE_FILES)


rule aggregate:
    """Run summaries -> tidy tables (runs.csv, cells.csv) and LaTeX versions of Tables 1-12."""
    input:
        runs=main_store_runs,
        reference=REFERENCE,
    output:
        runs=report(f"{TABLES}/runs.csv", caption="../report/runs.rst", category="Tables"),
        cells=report(f"{TABLES}/cells.csv", caption="../report/cells.rst", category="Tables"),
        tex=table_files(),
    params:
        trials=lambda wc: as_json(main_store_trials()),
        figures=as_json(table_figures()),
        out_dir=lambda wc, output: str(Path(output.runs).parent),
    log:
        f"{LOGS}/aggregate.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "python -m shallowrelu.aggregate --trials '{params.trials}' --figures '{params.figures}'"
        " --reference {input.reference} --out-dir {params.out_dir} > {log} 2>&1"


rule tables:
    """Named target: `snakemake tables`."""
    input:
        TABLE_FILES,
