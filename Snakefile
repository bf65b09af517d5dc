# Reproduction workflow for Chistikov, Englert & Lazić (NeurIPS 2023).
#
#   snakemake --cores 2                                  default (laptop-sized) config
#   snakemake --cores 2 --configfile config/paper.yaml   the paper's full grid
#   snakemake --cores 2 fig7                             one figure (also fig1 fig2 fig8 fig9 tables)
#
# Layout and conventions: docs/workflow.md.
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")
sys.path.insert(0, str(Path(workflow.basedir, "src")))
from shallowrelu.workflow_config import check_config, load_schema, skip_iri_format_checker

skip_iri_format_checker()  # ~3 s of each start (workflow_config.skip_iri_format_checker)


# The default config of this checkout, also when run with --directory elsewhere.
configfile: str(Path(workflow.basedir, "config", "config.yaml"))


# Nested --config values arrive as strings: parse them where the schema wants numbers etc.;
# name unknown keys with the allowed ones and bad values by their dotted key with what is
# allowed (one line, before any job runs); then validate again, filling in defaults.
_schema = load_schema(Path(workflow.basedir, "workflow", "schemas", "config.schema.yaml"))
check_config(config, _schema)
validate(config, "workflow/schemas/config.schema.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


# Every experiment family's rules file, in sorted order. train.smk comes last: it creates one
# training rule per trial that the families above registered with request_runs().
for _rules in sorted(Path(workflow.basedir, "workflow", "rules").glob("*.smk")):
    if _rules.name not in ("common.smk", "train.smk"):

        include: str(_rules)


include: "workflow/rules/train.smk"


rule all:
    default_target: True
    input:
        DEFAULT_TARGETS,
