"""The code passes ruff (the same check as `make lint`), so CI catches lint errors too."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (requirements.txt pins it)")
    res = subprocess.run([ruff, "check", "--no-cache", "src", "tests", "benchmarks", "scripts"], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
