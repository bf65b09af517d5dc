"""Options read from environment variables (the compiled loops' choices: kernels.py, vectors.py)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def env_choice(name: str, choices: tuple[str, ...]) -> str:
    """The value of ``name`` (default ``choices[0]``), lower-cased and checked against ``choices``:
    another value is refused with an error that names it and the allowed ones."""
    v = os.environ.get(name, choices[0]).strip().lower() or choices[0]
    if v not in choices:
        raise ValueError(f"{name}={v!r}: allowed values are {', '.join(choices)}")
    return v


@contextmanager
def env_setting(name: str, value: str, check: Callable[[], object] | None = None) -> Iterator[None]:
    """``name=value`` inside the block (``check``, e.g. the option's reader, is called first, so a
    bad value is refused before the block runs); the previous value (or its absence) after it."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        if check is not None:
            check()
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
