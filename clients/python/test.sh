#!/usr/bin/env bash
# clients/python/test.sh — the Python client's test suite, as scripts/test runs it.
#
#   bash clients/python/test.sh [PYTHON] [PYTEST ARGS...]
#
# PYTHON is the interpreter of a venv to install into: the argument, else
# $ROLLWAL_PYTHON, else .venv/bin/python (bash scripts/pyenv makes it). It
# installs pytest (pinned) and this package (as `pip install ./clients/python`
# would, from a copy, so that no build/ or *.egg-info lands in the checkout)
# into that venv, then runs pytest on clients/python/tests and exits with its
# status. The tests build the writer from this checkout (go build ./cmd/writer
# into a temporary directory; $ROLLWAL_WRITER names a prebuilt binary instead)
# and start their own `writer serve` processes on temporary data directories
# and free ports, so runs side by side do not collide; installs into one venv
# take turns (flock).
set -euo pipefail

PYTEST_VERSION=8.3.4

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="${ROLLWAL_PYTHON:-$root/.venv/bin/python}"
if [[ $# -gt 0 && $1 != -* ]]; then
	py="$1"
	shift
fi
if [[ ! -x $py ]]; then
	echo "clients/python/test.sh: no Python at $py: run bash scripts/pyenv (or pass a venv's python)" >&2
	exit 2
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/rollwal-pyclient.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
cp -R "$here/pyproject.toml" "$here/README.md" "$here/rollwal" "$tmp/src/"
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +

# The venv's own setuptools (61+, with wheel below 70.1) builds the package
# when it can (offline, quicker); else pip fetches setuptools into an isolated
# build environment, as a plain `pip install ./clients/python` does.
build_opts=()
if "$py" - 2>/dev/null <<'PY'; then
import sys, setuptools
v = tuple(int(x) for x in setuptools.__version__.split(".")[:2])
if v < (70, 1):
    import wheel  # bdist_wheel lives there before setuptools 70.1
sys.exit(v < (61, 0))
PY
	build_opts=(--no-build-isolation)
fi
install() {
	"$py" -m pip install --quiet --disable-pip-version-check "pytest==$PYTEST_VERSION"
	"$py" -m pip install --quiet --disable-pip-version-check --no-deps "${build_opts[@]}" "$tmp/src"
}
if command -v flock >/dev/null; then
	lock="${TMPDIR:-/tmp}/rollwal-pyclient-install-$(printf '%s' "$py" | cksum | cut -d' ' -f1).lock"
	(
		flock -w 600 9 || { echo "clients/python/test.sh: waited 600s for $lock" >&2; exit 1; }
		install
	) 9>"$lock"
else
	install
fi

echo "== python client: pytest $PYTEST_VERSION, $("$py" --version 2>&1), rollwal installed from a copy of clients/python" >&2
# From the temporary directory, so that the installed package (not the
# sources beside the tests) is the one imported.
cd "$tmp"
rc=0
PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest -q -p no:cacheprovider --rootdir "$here" -c "$here/pyproject.toml" --basetemp "$tmp/pytest" "$here/tests" "$@" || rc=$?
exit "$rc"
