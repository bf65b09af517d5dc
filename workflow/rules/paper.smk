# The reproduction report and the LaTeX companion document (issue 8; docs/report.md).
#
#   snakemake --cores 2 report   report CSVs (tables/report_*.csv), LaTeX snippets and
#                                report.md (paper/), one plot per paper table (figures/report_*)
#   snakemake --cores 2 paper    results/paper/companion.pdf from paper/companion.tex (latexmk)
#
# The report needs only the aggregated tables (runs.csv, cells.csv) and is in the default target
# whenever the grid is (paper.report). The PDF is in the default target only when paper.enabled
# is true and latexmk is installed, so a machine without LaTeX still builds everything else;
# asking for `paper` there fails with a message naming the Debian packages to install.
import shutil
from dataclasses import asdict

from shallowrelu.report import Thresholds, VerdictConfig, report_outputs  # noqa: E402  (one place for all)

PAPER = config.get("paper", {})
PAPER_DIR = f"{RESULTS}/paper"
PAPER_PDF = f"{PAPER_DIR}/companion.pdf"
PAPER_TEX = f"{REPO}/paper/companion.tex"
REPORT_FILES = report_outputs(TABLES, PAPER_DIR, FIGURES)
REPORT_ALL = [f for kind in ("csv", "tex", "md", "figures") for f in REPORT_FILES[kind]]
PAPER_TH = asdict(Thresholds(**PAPER.get("thresholds", {})).validate())
PAPER_TH.update(asdict(VerdictConfig(**PAPER.get("verdicts", {})).validate()))
LATEX_PACKAGES = "latexmk texlive-latex-base texlive-latex-recommended"
# Provenance per figure: the grids of Figs 7, 8 and the loss-curve runs of Figs 2, 9 (read from
# their run summaries; requested here with the same λ as figures.smk, so nothing new trains).
PAPER_GRIDS = {f: GRID[f] for f in ("fig7", "fig8")} if GRID["enabled"] else {}
PAPER_CURVE_RUNS = []
if CURVES["enabled"]:
    for _f in ("fig2", "fig9"):
        _c = CURVES[_f]
        PAPER_GRIDS[_f] = _c
        PAPER_CURVE_RUNS += request_runs(_c["scheme"], _c["d"], _c["m"], [_c["seed"]], _c["lambda_exps"],
                                         suffixes=(".json",))

# Appendix I / Example 31 results (JSON, from dynamics.smk) as LaTeX key/value tables.
APPI_JSON = ([f"{TABLES}/example31.json"] if config.get("dynamics", {}).get("enabled", False) else []) + (
    [f"{TABLES}/two_teacher_breaks.json", f"{TABLES}/fig11_events.json"]
    if config.get("two_teacher", {}).get("enabled", False) else [])
APPI_TEX = f"{PAPER_DIR}/appendix_i.tex"
if APPI_JSON:
    DEFAULT_TARGETS.append(APPI_TEX)
# Appendix G's tables are computed directly, not from runs: their provenance records (appendix_g.smk).
APPG_PROV_TEX = f"{PAPER_DIR}/appendix_g_provenance.tex"
if APPG_PROVENANCE:
    DEFAULT_TARGETS.append(APPG_PROV_TEX)

if GRID["enabled"] and PAPER.get("report", True):
    DEFAULT_TARGETS.extend(REPORT_ALL)
if GRID["enabled"] and PAPER.get("enabled", False):
    if shutil.which("latexmk"):
        DEFAULT_TARGETS.append(PAPER_PDF)
    else:
        print(f"note: paper.enabled is set but latexmk is not installed; skipping {PAPER_PDF} "
              f"(apt-get install {LATEX_PACKAGES})", file=sys.stderr)


rule reproduction_report:
    """Cell-by-cell verdicts against the paper's Tables 1-12 (where the paper's median and std fall in
    the sampling distribution of a 5-trial median and std of our trials), derived comparisons, the
    std-convention evidence, plots, macros."""
    input:
        runs=f"{TABLES}/runs.csv",
        cells=f"{TABLES}/cells.csv",
        reference=REFERENCE,
        curve_runs=PAPER_CURVE_RUNS,
    output:
        csv=[report(f, category="Reproduction report") if f.endswith("report_cells.csv") else f
             for f in REPORT_FILES["csv"]],
        tex=REPORT_FILES["tex"],
        md=REPORT_FILES["md"],
        figures=REPORT_FILES["figures"],
    params:
        runs_root=lambda wc: RUNS,
        grids=lambda wc: as_json(PAPER_GRIDS),
        alt=" ".join(PAPER.get("alt_results", [])),
        th=" ".join(f"--{k.replace('_', '-')} {v}" for k, v in PAPER_TH.items()),
        tables=lambda wc, output: str(Path(output.csv[0]).parent),
        paper_dir=lambda wc, output: str(Path(output.tex[0]).parent),
        figures=lambda wc, output: str(Path(output.figures[0]).parent),
    log:
        f"{LOGS}/paper/report.log",
    conda:
        "../../envs/analysis.yaml"
    shell:
        "python -m shallowrelu report --runs {input.runs} --cells {input.cells} --reference {input.reference}"
        " --tables-dir {params.tables} --paper-dir {params.paper_dir} --figures-dir {params.figures}"
        " --runs-root {params.runs_root} --figure-grids '{params.grids}' {params.th}"
        " --alt-runs {params.alt} > {log} 2>&1"


if APPI_JSON:

    rule appendix_i_summary:
        """Example 31 and two-teacher results (crossing order, alignment, loss drops) for the document."""
        input:
            APPI_JSON,
        output:
            APPI_TEX,
        log:
            f"{LOGS}/paper/appendix_i.log",
        conda:
            "../../envs/analysis.yaml"
        shell:
            "python -m shallowrelu.report json-tables --out {output} {input} > {log} 2>&1"


if APPG_PROVENANCE:

    rule appendix_g_provenance:
        """The Appendix G tables' provenance records (file, SHA-256, commit, time) for the document."""
        input:
            APPG_PROVENANCE,
        output:
            APPG_PROV_TEX,
        log:
            f"{LOGS}/paper/appendix_g_provenance.log",
        conda:
            "../../envs/analysis.yaml"
        shell:
            "python -m shallowrelu.report provenance-records --out {output} {input} > {log} 2>&1"


rule companion_pdf:
    """paper/companion.tex -> results/paper/companion.pdf with latexmk (every number \\input from the report).

    Depends on the report and on every other default output, so the document shows all of them;
    sections whose outputs a config does not build show a note instead (\\IfFileExists).
    """
    input:
        tex=PAPER_TEX,
        report=REPORT_ALL,
        others=lambda wc: [t for t in DEFAULT_TARGETS if t != PAPER_PDF and t not in REPORT_ALL],
    output:
        pdf=report(PAPER_PDF, category="Reproduction report"),
    params:
        build=f"{PAPER_DIR}/build",
        pretex=lambda wc: f"\\def\\ResultsDir{{{RESULTS}}}",
        packages=LATEX_PACKAGES,
    log:
        f"{LOGS}/paper/latexmk.log",
    # LaTeX is not on conda's default channels in a form this document was tested with; the
    # tested setup is Debian's TeX Live (docs/report.md). With --software-deployment-method
    # apptainer this image provides it instead (not tested here: no container runtime).
    container:
        "docker://texlive/texlive:TL2023-historic"
    shell:
        "if ! command -v latexmk >/dev/null 2>&1 || ! command -v pdflatex >/dev/null 2>&1; then"
        " echo 'error: building {output.pdf} needs LaTeX (latexmk, pdflatex), which is not installed. On"
        " Debian/Ubuntu: sudo apt-get install --no-install-recommends {params.packages}. Everything else"
        " builds without it (snakemake report).' | tee {log} >&2; exit 1; fi;"
        " latexmk -pdf -interaction=nonstopmode -halt-on-error -outdir={params.build}"
        " -usepretex={params.pretex:q} {input.tex} > {log} 2>&1"
        " || {{ echo 'latexmk failed; see {log}' >&2; tail -n 30 {log} >&2; exit 1; }};"
        " cp {params.build}/companion.pdf {output.pdf}.tmp && mv {output.pdf}.tmp {output.pdf}"


rule report:
    """Named target: the report tables, snippets and plots (no LaTeX needed)."""
    input:
        REPORT_ALL,
    default_target: False


rule paper:
    """Named target: the companion PDF (needs latexmk; see docs/report.md)."""
    input:
        PAPER_PDF,
    default_target: False
