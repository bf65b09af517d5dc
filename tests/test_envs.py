"""envs/*.yaml (conda, for `snakemake --use-conda`) pin the versions of requirements.txt.

Conda channels are not reachable in CI, so the environments cannot be built here; this
checks that every package they list is pinned to the version tested with pip.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# pip name -> conda(-forge) name, where they differ
CONDA_NAMES = {"torch": "pytorch"}
# packages each environment must provide (pip names)
REQUIRED = {
    "train.yaml": {"torch", "numpy", "numba", "scipy", "tqdm"},
    "analysis.yaml": {"numpy", "pandas", "matplotlib", "pyyaml", "papermill", "ipykernel", "nbformat",
                      "nbconvert"},
}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.txt line {line!r} is not pinned with =="
            pins[norm(name)] = version.strip()
    return pins


def env_pins(path: Path) -> dict[str, str]:
    """pip name -> version of every dependency of a conda environment file (conda and pip: parts)."""
    env = yaml.safe_load(path.read_text())
    conda_to_pip = {v: k for k, v in CONDA_NAMES.items()}
    out = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for line in dep.get("pip", []):
                name, sep, version = line.partition("==")
                assert sep, f"{path.name}: pip dependency {line!r} is not pinned with =="
                out[norm(name)] = version.strip()
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*==?\s*([^=\s]+)", dep)
        assert m, f"{path.name}: conda dependency {dep!r} is not pinned (name=version)"
        name = norm(m.group(1))
        out[norm(conda_to_pip.get(name, name))] = m.group(2)
    return out


ENV_FILES = sorted((REPO / "envs").glob("*.yaml"))


def test_env_files_exist():
    assert {p.name for p in ENV_FILES} >= set(REQUIRED)


@pytest.mark.parametrize("path", ENV_FILES, ids=lambda p: p.name)
def test_env_pins_agree_with_requirements(path):
    pins, env = pip_pins(), env_pins(path)
    py = env.pop("python", None)
    assert py is not None and py.startswith("3."), f"{path.name} must pin python"
    unknown = sorted(set(env) - set(pins))
    assert not unknown, f"{path.name} lists packages not pinned in requirements.txt: {unknown}"
    wrong = {k: (v, pins[k]) for k, v in env.items() if v != pins[k]}
    assert not wrong, f"{path.name} pins differ from requirements.txt (env, pip): {wrong}"
    missing = {norm(x) for x in REQUIRED.get(path.name, set())} - set(env)
    assert not missing, f"{path.name} lacks {sorted(missing)}"


def test_rules_name_existing_envs():
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        for rel in re.findall(r'conda:\s*\n\s*"([^"]+)"', smk.read_text()):
            assert (smk.parent / rel).resolve().exists(), f"{smk.name}: conda env {rel} missing"
