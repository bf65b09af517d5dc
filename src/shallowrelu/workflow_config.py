"""Checks on the workflow configuration before Snakemake's schema validation (Snakefile).

Two things the schema validator alone does badly:

* ``snakemake --config train='{max_iters: 1000}'`` hands nested values over as strings
  (Snakemake parses them with YAML's BaseLoader); ``coerce_cli_strings`` turns such strings
  back into numbers, booleans, null or lists wherever the schema asks for a non-string.
* an unknown key should be named with the keys allowed at that place; ``check_unknown_keys``
  raises a short ValueError saying exactly that (the validator prints the whole schema).
* a bad value should be named by its full dotted key with what is allowed there;
  ``check_values`` raises a one-line ValueError such as "config key train.max_iters: got 'abc'
  (a string); allowed: an integer >= 1" (jsonschema's own messages name neither).

``check_config`` runs the three in order; the Snakefile calls it before Snakemake's validation
(which then only fills in the defaults), so a bad config fails before any job runs.

``skip_iri_format_checker`` spares each Snakemake start ~3 s of an optional import of jsonschema.
``prepend_pythonpath`` lets every job import the package of the checkout it runs from;
``profile_config`` reads the config a Snakemake profile sets (e.g. profiles/gpu's train settings).
``train_memory_mb`` is the memory model behind the training jobs' ``mem_mb`` (common.smk).
"""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml


def load_schema(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow a local ``$ref`` (and a one-element ``allOf`` of one) to the schema it names."""
    seen = 0
    while isinstance(node, dict) and seen < 20:
        seen += 1
        if "$ref" in node and str(node["$ref"]).startswith("#/"):
            target: Any = root
            for part in node["$ref"][2:].split("/"):
                target = target[part]
            merged = dict(target)
            merged.update({k: v for k, v in node.items() if k != "$ref"})
            node = merged
            continue
        if "allOf" in node and len(node["allOf"]) == 1:
            merged = dict(_resolve(node["allOf"][0], root))
            extra = {k: v for k, v in node.items() if k != "allOf"}
            if "properties" in extra and "properties" in merged:
                extra["properties"] = {**merged["properties"], **extra["properties"]}
            merged.update(extra)
            node = merged
            continue
        break
    return node


def _wants_string(node: dict[str, Any]) -> bool:
    t = node.get("type")
    types = t if isinstance(t, list) else [t] if t else []
    if "string" in types:
        return True
    if "enum" in node and all(isinstance(v, str) for v in node["enum"]):
        return True
    if "const" in node and isinstance(node["const"], str):
        return True
    return not types and "enum" not in node and "const" not in node  # unknown: leave it alone


def _allows_null(node: dict[str, Any]) -> bool:
    t = node.get("type")
    return "null" in (t if isinstance(t, list) else [t])


def coerce_cli_strings(value: Any, schema: dict[str, Any], node: dict[str, Any] | None = None) -> Any:
    """Parse string leaves with YAML where the schema expects a non-string (in place for dicts)."""
    node = _resolve(schema if node is None else node, schema)
    if isinstance(value, dict):
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        for key in list(value):
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                value[key] = coerce_cli_strings(value[key], schema, sub)
        return value
    if isinstance(value, list):
        items = node.get("items")
        return [coerce_cli_strings(v, schema, items) for v in value] if isinstance(items, dict) else value
    if isinstance(value, str) and value.strip() in ("null", "~") and _allows_null(node):
        return None
    if isinstance(value, str) and not _wants_string(node):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if isinstance(parsed, (dict, list)):
            return coerce_cli_strings(parsed, schema, node)
        return parsed
    return value


def check_unknown_keys(config: dict[str, Any], schema: dict[str, Any], where: str = "config") -> None:
    """Raise ValueError naming the first key the schema does not allow, and the allowed keys."""
    _check(config, schema, schema, where)


def _check(value: Any, node: dict[str, Any], root: dict[str, Any], where: str) -> None:
    node = _resolve(node, root)
    if not isinstance(value, dict):
        return
    props = node.get("properties", {})
    patterns = node.get("patternProperties", {})
    extra = node.get("additionalProperties", True)
    for key, sub_value in value.items():
        here = f"{where}.{key}" if where else str(key)
        matched = [p for p in patterns if re.search(p, str(key))]
        if key in props:
            _check(sub_value, props[key], root, here)
        elif matched:
            _check(sub_value, patterns[matched[0]], root, here)
        elif extra is False:
            allowed = ", ".join(sorted(props) + [f"keys matching {p}" for p in patterns]) or "(none)"
            raise ValueError(f"unknown config key {key!r} in {where}; allowed keys there: {allowed}")
        elif isinstance(extra, dict):
            _check(sub_value, extra, root, here)


def profile_config(profile_dir: str | Path) -> dict[str, Any]:
    """The config a Snakemake profile sets: its ``config:`` entries ``KEY=VALUE`` (VALUE read as
    YAML, as ``snakemake --config`` does), e.g. ``{"train": {"device": "cuda", ...}}``."""
    with open(Path(profile_dir) / "config.yaml", encoding="utf-8") as fh:
        entries = (yaml.safe_load(fh) or {}).get("config") or []
    return {key: yaml.safe_load(value) for key, value in (str(e).split("=", 1) for e in entries)}


def prepend_interpreter_path(executable: str | Path) -> str:
    """Put the directory of ``executable`` (the Python running Snakemake) first on PATH, once.

    Rules call ``python``, ``papermill`` and ``latexmk`` by name; without this, a Snakemake
    started as ``.venv/bin/snakemake`` (``make run``) or ``python -m snakemake`` without an
    activated environment would run the jobs with whatever ``python`` comes first on PATH.
    With ``--use-conda`` the job's conda environment is activated on top and wins.
    """
    bindir = str(Path(executable).parent)
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    if not parts or parts[0] != bindir:
        os.environ["PATH"] = os.pathsep.join([bindir, *[p for p in parts if p != bindir]])
    return os.environ["PATH"]


def prepend_pythonpath(path: str | Path) -> str:
    """Put ``path`` first on PYTHONPATH of this process (and so of the jobs it starts), once."""
    path = str(path)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if path not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([path, *parts])
    return os.environ["PYTHONPATH"]


# --- values ---------------------------------------------------------------------------------


def skip_iri_format_checker() -> None:
    """Keep jsonschema, when this process first imports it, from loading its IRI format checker.

    jsonschema imports every optional format checker it finds; rfc3987_syntax (the non-GPL IRI
    checker, installed through jupyter's ``jsonschema[format-nongpl]``) compiles ~38 Earley
    parsers at import: ~3 s of every Snakemake start on a 2-core machine, a start that each job
    of a Slurm group job repeats (jsonschema issue #1428). The config schema has no ``format``
    keyword (tests/test_workflow.py checks), so no check changes. Python's documented rule: a
    None entry in ``sys.modules`` makes that import fail, which jsonschema skips. Does nothing
    once jsonschema is imported.
    """
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


def check_config(config: dict[str, Any], schema: dict[str, Any]) -> None:
    """Coerce command-line strings, then reject unknown keys and bad values (one-line ValueError)."""
    coerce_cli_strings(config, schema)
    check_unknown_keys(config, schema)
    check_values(config, schema)


def check_values(config: Any, schema: dict[str, Any]) -> None:
    """Raise ValueError naming the first bad value by its dotted key, with what the schema allows."""
    import jsonschema
    from jsonschema.exceptions import relevance

    validator = jsonschema.Draft202012Validator(schema)
    errors = list(validator.iter_errors(config))
    if errors:
        raise ValueError(_message(_innermost(max(errors, key=relevance)), schema))


def _innermost(err: Any) -> Any:
    """For a failed anyOf/oneOf, the error inside the alternative meant (the one whose ``const``
    keys match, else the one with fewest errors) when it concerns a deeper key."""
    from jsonschema.exceptions import relevance

    while err.validator in ("anyOf", "oneOf") and err.context:
        branches: dict[int, list[Any]] = {}
        for sub in err.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        matching = [b for b in branches.values() if not any(e.validator == "const" for e in b)]
        if not matching:  # no alternative is meant (e.g. an unknown 'family'): name them all
            break
        inner = max(min(matching, key=len), key=relevance)
        if len(inner.absolute_path) <= len(err.absolute_path):
            break
        err = inner
    return err


def _key(path: Any) -> str:
    """Dotted key of a jsonschema path: train.max_iters, grid.seeds[0]."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the whole config)"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    for typ, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                      (list, "a list"), (dict, "a mapping")):
        if isinstance(value, typ):
            return name
    return type(value).__name__


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _discriminator(err: Any) -> str | None:
    """For a failed oneOf/anyOf of mappings told apart by one key's ``const`` (appendix_g's
    ``family``) when that key matches none of them: the message about that key, else None."""
    consts = [e for e in err.context if e.validator == "const"]
    paths = {tuple(e.absolute_path) for e in consts}
    n_alternatives = len({e.relative_schema_path[0] for e in err.context})
    if len(paths) != 1 or len(consts) != n_alternatives or len(next(iter(paths))) <= len(err.absolute_path):
        return None
    value = consts[0].instance
    allowed = " or ".join(repr(e.validator_value) for e in consts)
    return f"config key {_key(next(iter(paths)))}: got {_shown(value)} ({_kind(value)}); allowed: {allowed}"


def _message(err: Any, root: dict[str, Any]) -> str:
    key, node = _key(err.absolute_path), err.schema
    if err.validator in ("anyOf", "oneOf") and err.context and (text := _discriminator(err)):
        return text
    if err.validator == "required":
        missing = [k for k in err.validator_value if k not in err.instance]
        sub = node.get("properties", {}).get(missing[0], {}) if missing else {}
        return (f"config key {key}.{missing[0]} is missing; it is required there, allowed: "
                f"{describe(sub, root)}")
    if "propertyNames" in err.schema_path:
        return f"config key {key}: name {_shown(err.instance)} not allowed; allowed: names {describe(node, root)}"
    value = err.instance
    return f"config key {key}: got {_shown(value)} ({_kind(value)}); allowed: {describe(node, root)}"


def _range(node: dict[str, Any]) -> str:
    lo = ("[", node["minimum"]) if "minimum" in node else ("(", node["exclusiveMinimum"]) \
        if "exclusiveMinimum" in node else None
    hi = ("]", node["maximum"]) if "maximum" in node else (")", node["exclusiveMaximum"]) \
        if "exclusiveMaximum" in node else None
    if lo and hi:
        return f" in {lo[0]}{lo[1]}, {hi[1]}{hi[0]}"
    if lo:
        return f" {'>=' if lo[0] == '[' else '>'} {lo[1]}"
    if hi:
        return f" {'<=' if hi[0] == ']' else '<'} {hi[1]}"
    return ""


def _describe_type(t: str, node: dict[str, Any], root: dict[str, Any]) -> str:
    if t in ("integer", "number"):
        return ("an integer" if t == "integer" else "a number") + _range(node)
    if t == "string":
        text = "a non-empty string" if node.get("minLength", 0) >= 1 else "a string"
        return text + (f" matching {node['pattern']}" if "pattern" in node else "")
    if t == "boolean":
        return "true or false"
    if t == "array":
        extra = [f"at least {node['minItems']}"] if node.get("minItems") else []
        extra += ["no repeats"] if node.get("uniqueItems") else []
        items = f" each {describe(node['items'], root)}" if isinstance(node.get("items"), dict) else ""
        return "a list" + (f" ({', '.join(extra)})" if extra else "") + (f" of items{items}" if items else "")
    if t == "object":
        props = node.get("properties", {})
        if props:
            req = set(node.get("required", []))
            keys = ", ".join(f"{k}{' (required)' if k in req else ''}"
                             + (f" = {props[k]['const']!r}" if "const" in props[k] else "") for k in props)
            return f"a mapping with keys {keys}"
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            least = f" (at least {node['minProperties']})" if node.get("minProperties") else ""
            return f"a mapping of names to values{least} each {describe(extra, root)}"
        return "a mapping"
    return t


def describe(node: dict[str, Any], root: dict[str, Any]) -> str:
    """What the schema ``node`` allows, in words: 'an integer >= 1', "one of 'authors', 'paper'"."""
    node = _resolve(node, root)
    alternatives = node.get("anyOf") or node.get("oneOf")
    if alternatives:
        return " or ".join(f"({describe(a, root)})" if " or " in describe(a, root) else describe(a, root)
                           for a in alternatives)
    if "const" in node:
        return repr(node["const"])
    if "enum" in node:
        return "one of " + ", ".join(repr(v) for v in node["enum"])
    t = node.get("type")
    types = t if isinstance(t, list) else [t] if t else []
    parts = [_describe_type(x, node, root) for x in types if x != "null"]
    parts += ["null"] if "null" in types else []
    if not parts and "pattern" in node:
        parts = [f"matching {node['pattern']}"]
    return " or ".join(parts) or "any value"


# --- resources ------------------------------------------------------------------------------

# Coefficients of train_memory_mb, in float64 values (8 bytes) unless marked otherwise.
MEM_TRIAL_ND = 20  # per trial, × n·d: its data (X and the evaluation sets, 7.25·n·d) as numpy arrays and
#                   again as the batch's tensors, the dense layout's X and Xᵀ, the singular basis, the
#                   checkpoint's transient copy of the largest tensor (pickled twice over)
MEM_TRIAL_DD = 4  # per trial, × d²: the eigenbasis of XᵀX/n, its eigh, Uᵀ of the SVD
MEM_RUN_DD = 1  # per run, × d²: measure()'s eigenbasis gathered per run at every logging point (transient)
MEM_RUN_MND = 12  # per run, × m·(n + d): weights, W_prev, the layouts' (neurons × points) buffers, the
#                   spectral and grouped steppers' classification arrays (transient)
MEM_ROW_EXTRA = 128  # per run and logging point, × (d + this): a history row (d eigen-coordinates, ~40 scalars)
MEM_RUN_BYTES = 1_000_000  # per run, bytes: Python objects, its result files' buffers


def train_memory_mb(d: int, m: int, n_runs: int, n_trials: int, n: int | None = None, n_log: int = 1000,
                    base_mb: float = 1000, safety: float = 3.0) -> int:
    """Memory request (MB, 10⁶ bytes) of a ``train`` job of ``n_runs`` runs on ``n_trials`` trials
    (datasets of n points in d dimensions, n = d by default; width m), with at most ``n_log``
    logging points: ``base_mb + safety × model``, where ``model`` (bytes) is a fit of the peak RSS,
    float64 on the CPU:

        8 × [ n_trials × (20·n·d + 4·d²)                     data, layouts, bases, checkpoint
              + n_runs × (d² + 12·m·(n + d))                 measurements, weights, step buffers
              + n_runs × n_log × (d + 128) ]                 histories
        + n_runs × 1 MB

    (MEM_* above say what each term covers). Fitted to the peak RSS (``/usr/bin/time -f %M``, one
    thread, a checkpoint at every logging point) of jobs at d ∈ {16, 64, 256, 1024}, m ∈ {25, 200},
    1–5 trials and 4–80 runs (tests/test_memory_model.py): ~400 MB (interpreter, torch, the numba
    kernels) plus the model is within 0.75–1.2 of each peak, except where the C allocator kept up
    to ~400 MB of freed heap (d = 256, varying from run to run). ``base_mb`` (config
    ``train.resources.mem_mb_base``, 1000) covers both, so base_mb + model alone is ≥ 1.2 × every
    measured peak; ``safety`` (``mem_safety``, 3) is headroom on top. On CUDA the batch lives on
    the device: host memory is less."""
    n = d if n is None else n
    per_trial = MEM_TRIAL_ND * n * d + MEM_TRIAL_DD * d * d
    per_run = MEM_RUN_DD * d * d + MEM_RUN_MND * m * (n + d) + n_log * (d + MEM_ROW_EXTRA)
    model = 8 * (n_trials * per_trial + n_runs * per_run) + n_runs * MEM_RUN_BYTES
    return int(base_mb + math.ceil(safety * model / 1e6))
