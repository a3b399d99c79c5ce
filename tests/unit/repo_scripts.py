"""A script of the repository (``benchmarks/``, ``tools/``) loaded as a module, for tests of its pure parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative: str) -> ModuleType:
    """``relative`` to the repository root, e.g. ``"benchmarks/bench_scale.py"``; registered in ``sys.modules`` under
    its file name, where dataclasses look their module up."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(path.stem, module)
    spec.loader.exec_module(module)
    return module
