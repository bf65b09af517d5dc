"""``python -m shallowrelu.notebook_job IN OUT [papermill options]``: papermill's own command line,
started ~3 s sooner (the workflow's notebook rules run it).

papermill imports nbformat, which imports jsonschema, which imports every optional format checker
it finds: rfc3987_syntax (its non-GPL IRI checker) compiles ~38 parsers at import, ~3 of the
~4 s papermill takes to start here. Neither nbformat's notebook schema nor papermill checks an
IRI format (:func:`shallowrelu.workflow_config.skip_iri_format_checker`). A module of its own, not a
command of ``python -m shallowrelu``, whose command line imports torch (~2 s) that a notebook job
does not need.
"""

from __future__ import annotations

from .workflow_config import skip_iri_format_checker


def main() -> None:
    skip_iri_format_checker()
    from papermill.cli import papermill

    papermill(prog_name="papermill")


if __name__ == "__main__":
    main()
