"""Helpers for tests of the scripts under benchmarks/ (loaded as files: they are not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from shallowrelu.engine import _write_checkpoint

REPO = Path(__file__).resolve().parents[1]


def load(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def checkpoint(path: Path, batch: Any, keys: list[str], iteration: int) -> Path:
    """A job checkpoint file at ``path`` holding ``batch``'s state, each run (``keys``) last logged at ``iteration``."""
    _write_checkpoint(path, {"batch": batch.state(), "histories": {k: [{"iteration": iteration}] for k in keys}})
    return path
