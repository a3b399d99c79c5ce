#!/usr/bin/env bash
# Build the documentation site into site/ (gitignored) with warnings as errors: `mkdocs build --strict`.
# Uses the project's .venv (created/updated by scripts/setup.sh with the `docs` extra). AKRESIL_VENV=/path
# uses an existing environment as it is instead (no install step).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${AKRESIL_VENV:-}" ]; then
    PY="$AKRESIL_VENV/bin/python"
else
    AKRESIL_EXTRAS="docs${AKRESIL_EXTRAS:+,$AKRESIL_EXTRAS}" bash scripts/setup.sh
    PY=.venv/bin/python
fi
if ! "$PY" -c "import mkdocs, material" 2>/dev/null; then
    echo "docs.sh: mkdocs-material is not installed in $("$PY" -c 'import sys; print(sys.prefix)');" \
         "install akresil with the 'docs' extra (pip install -e '.[docs]')" >&2
    exit 1
fi
# the configuration reference is generated from akresil/config.py: a stale page fails the build
"$PY" tools/gen_config_docs.py --check
# so is the admin API reference, from the code's signatures and docstrings
"$PY" tools/gen_api_docs.py --check
NO_MKDOCS_2_WARNING=1 exec "$PY" -m mkdocs build --strict --site-dir site "$@"
