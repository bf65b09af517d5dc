"""Options read from environment variables (the compiled loops' choices: kernels.py, vectors.py)."""

from __future__ import annotations

import os


def env_choice(name: str, choices: tuple[str, ...]) -> str:
    """The value of ``name`` (default ``choices[0]``), lower-cased and checked against ``choices``:
    another value is refused with an error that names it and the allowed ones."""
    v = os.environ.get(name, choices[0]).strip().lower() or choices[0]
    if v not in choices:
        raise ValueError(f"{name}={v!r}: allowed values are {', '.join(choices)}")
    return v
