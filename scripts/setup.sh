# Sourced by scripts/build and scripts/test: make .venv if missing and install the pinned
# versions (constraints.txt) whenever they or pyproject.toml change.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python 3.11 or newer is needed" >&2; exit 1; }
  "$python" -m venv .venv
fi
stamp=$(cat constraints.txt pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat .venv/.installed 2>/dev/null)" != "$stamp" ]; then
  echo "Installing pinned packages into .venv (once) ..." >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[course,test]"
  echo "$stamp" > .venv/.installed
fi
export NO_MKDOCS_2_WARNING=1
export DISABLE_MKDOCS_2_WARNING=true  # the same banner, from properdocs (which mkdocs-redirects requires)
