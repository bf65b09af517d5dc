"""Bad workflow configs (issue 16): every key of the schema given a wrong type or an
out-of-range value must be refused before any job with one line naming the key and what it allows;
docs/faults.md has the table (tests/test_faults.py holds the other faults).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")


# -- config fuzzing -----------------------------------------------------------------------------------

SCHEMA_PATH = REPO / "workflow" / "schemas" / "config.schema.yaml"


def _schema_keys(node: dict, root: dict, base: object, path: tuple = ()):
    """(dotted path as a tuple, schema node, a valid config of the tiny sort that has the key)
    for every key of the schema: nested sections, $ref/allOf definitions, and the named entries
    of mappings (one per alternative of a oneOf, named after an entry of tiny.yaml that fits)."""
    from shallowrelu.workflow_config import _resolve

    node = _resolve(node, root)
    for key, sub in node.get("properties", {}).items():
        yield path + (key,), sub
        sub_base = base.get(key, {}) if isinstance(base, dict) else {}
        yield from _schema_keys(sub, root, sub_base, path + (key,))
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and isinstance(base, dict) and base:
        for alt in extra.get("oneOf", [extra]):
            fam = alt.get("properties", {}).get("family", {}).get("const")
            name = next((k for k, v in base.items() if fam is None or v.get("family") == fam), next(iter(base)))
            yield path + (name,), alt
            yield from _schema_keys(alt, root, base[name], path + (name,))


def _wrong_type(node: dict, root: dict):
    """A value of a type the key never takes."""
    from shallowrelu.workflow_config import _resolve

    node = _resolve(node, root)
    alts = node.get("anyOf") or node.get("oneOf") or [node]
    takes_str = any("string" in str(a.get("type", "")) or isinstance(a.get("const"), str)
                    or any(isinstance(v, str) for v in a.get("enum", [])) for a in alts)
    takes_num = any(t in str(a.get("type", "")) for a in alts for t in ("integer", "number"))
    return [1, 2] if takes_str and takes_num else (12345 if takes_str else "abc")


def _out_of_range(node: dict, root: dict) -> list:
    """Values of the right type outside what the key allows (none if it has no limits)."""
    from shallowrelu.workflow_config import _resolve

    node = _resolve(node, root)
    alts = node.get("anyOf") or node.get("oneOf")
    if alts:
        return [v for a in alts if "const" not in a for v in _out_of_range(a, root)][:1]
    out: list = []
    if "enum" in node or "const" in node:
        out.append("no-such-value")
    for key, shift in (("minimum", -1), ("exclusiveMinimum", 0), ("maximum", 1), ("exclusiveMaximum", 0)):
        if key in node:
            out.append(node[key] + shift)
    if "pattern" in node:
        out.append("no such thing!")
    if node.get("minLength"):
        out.append("")
    if node.get("type") == "array":
        if node.get("minItems"):
            out.append([])
        items = _resolve(node.get("items", {}), root)
        out += [[v] for v in _out_of_range(items, root)[:1]]
        if node.get("uniqueItems"):
            ok = items["enum"][0] if "enum" in items else items.get("minimum", 0) + 1
            out.append([ok, ok])
    if node.get("minProperties"):
        out.append({})
    return out


def _set(cfg: dict, path: tuple, value) -> dict:
    import copy

    cfg = copy.deepcopy(cfg)
    here = cfg
    for key in path[:-1]:
        here = here.setdefault(key, {})
    here[path[-1]] = value
    return cfg


def _fuzz_cases():
    import yaml

    from shallowrelu.workflow_config import load_schema

    schema = load_schema(SCHEMA_PATH)
    base = yaml.safe_load((REPO / "config" / "tiny.yaml").read_text())
    cases = []
    for path, node in _schema_keys(schema, schema, base):
        cases.append((path, "wrong type", _wrong_type(node, schema)))
        cases += [(path, "out of range", v) for v in _out_of_range(node, schema)]
    return schema, base, cases


def test_config_fuzzing_names_every_key_and_what_it_allows():
    """Every key of the config schema (walked from the schema itself), given a value of a wrong
    type and each out-of-range value it has limits for: check_config (the Snakefile's first call,
    before any job) raises one line naming the full dotted key and what is allowed there."""
    from shallowrelu.workflow_config import check_config

    schema, base, cases = _fuzz_cases()
    check_config(__import__("copy").deepcopy(base), schema)  # the base is valid
    keys = {".".join(p) for p, _, _ in cases}
    assert len(keys) >= 80 and {"train.max_iters", "train.resources.runtime_max_minutes", "grid.fig7.schemes",
                                "appendix_g.sweep.datasets.negative.xi", "two_teacher.fig11.rho",
                                "paper.thresholds.worst_n", "appendix_g.scan.min_norm"} <= keys
    assert sum(kind == "out of range" for _, kind, _ in cases) >= 60
    failures = []
    for path, kind, value in cases:
        dotted = ".".join(path)
        try:
            check_config(_set(base, path, value), schema)
        except ValueError as exc:
            msg = str(exc)
            ok = ("\n" not in msg and msg.startswith("config key ") and dotted in msg and "allowed: " in msg
                  and "any value" not in msg and len(msg) < 400)
            if not ok:
                failures.append(f"{dotted} = {value!r} ({kind}): {msg}")
        else:
            failures.append(f"{dotted} = {value!r} ({kind}): accepted")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("path, value, message", [
    ("train.max_iters", "abc", "config key train.max_iters: got 'abc' (a string); allowed: an integer >= 1"),
    ("grid.lambda_exps", [3, 11], "config key grid.lambda_exps[1]: got 11 (an integer); allowed: an integer in "
                                  "[-30, 10]"),
    ("appendix_g.sweep.datasets.negative.xi", 1.5, "config key appendix_g.sweep.datasets.negative.xi: got 1.5 (a "
                                                     "number); allowed: a number in (0, 1)"),
    ("two_teacher.fig11.rho", "abc", "config key two_teacher.fig11.rho: got 'abc' (a string); allowed: 'own' or a "
                                     "number > 0"),
    ("train.device", "tpu", "config key train.device: got 'tpu' (a string); allowed: a string matching "
                            "^(auto|cpu|cuda(:[0-9]+)?)$"),
    ("grid.fig8", {"schemes": ["centred"], "dims": [16]}, "config key grid.fig8.widths is missing; it is required "
                                                          "there, allowed: a list (at least 1, no repeats) of items "
                                                          "each an integer >= 1"),
])
def test_config_messages(path, value, message):
    from shallowrelu.workflow_config import check_config

    schema, base, _ = _fuzz_cases()
    with pytest.raises(ValueError) as exc:
        check_config(_set(base, tuple(path.split(".")), value), schema)
    assert str(exc.value) == message
