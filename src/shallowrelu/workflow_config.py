"""Checks on the workflow configuration before Snakemake's schema validation (Snakefile).

Two things the schema validator alone does badly:

* ``snakemake --config train='{max_iters: 1000}'`` hands nested values over as strings
  (Snakemake parses them with YAML's BaseLoader); ``coerce_cli_strings`` turns such strings
  back into numbers, booleans, null or lists wherever the schema asks for a non-string.
* an unknown key should be named with the keys allowed at that place; ``check_unknown_keys``
  raises a short ValueError saying exactly that (the validator prints the whole schema).

``prepend_pythonpath`` lets every job import the package of the checkout it runs from.
"""

from __future__ import annotations

import os
import re
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
