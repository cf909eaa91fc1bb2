#!/usr/bin/env bash
# Create .venv if it is missing and install perfgate with the pinned reference
# environment (constraints.txt), with the test extra and the frameworks extra (Lightning,
# transformers with accelerate, timm: about 230 MB more, which the default test lane runs
# real scripts on). Re-running is cheap: pip is skipped while neither pyproject.toml nor
# constraints.txt has changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.perfgate-installed
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! .venv/bin/python -c "import perfgate, torch, torchvision, psycopg" 2>/dev/null \
        || [ ! -x .venv/bin/ruff ] || [ ! -x .venv/bin/mypy ]; then
    .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[test,frameworks]"
    echo "$want" > "$stamp"
fi
