"""Compile akresil to bytecode before a benchmark, as installing the package does.

A benchmark run from a checkout, with ``PYTHONDONTWRITEBYTECODE=1`` (this project's machines set it) or with
``.pyc`` files older than their sources, compiles every akresil module it imports from source, in every process,
and a measured window that imports a module lazily (the consumer's first Fetch loads the record codec; Spark
starts fresh Python processes per query) then times the compiler: 0.16 s of a 1.7 s round at 10,000 partitions.
An installed akresil has its bytecode from ``pip install``; so does the benchmark, with this, unless it is told
to measure the from-source case.
"""

from __future__ import annotations

import compileall
from pathlib import Path


def compile_akresil() -> str:
    """Write current ``.pyc`` files for every akresil module (a no-op for those already current, whatever
    ``PYTHONDONTWRITEBYTECODE`` says: it governs imports, not ``compileall``). Returns what was done, for the
    benchmark's JSON; RuntimeError naming the folder if a module does not compile."""
    import akresil

    package = Path(akresil.__file__).parent
    if not compileall.compile_dir(str(package), quiet=1):
        raise RuntimeError(f"compiling {package} to bytecode failed")
    return f"compiled ahead (compileall {package}), as pip install does"
