#!/usr/bin/env bash
# The Python client's tests (clients/python): mypy --strict, then pytest
# against a real daemon (target/debug/memd on a fresh database of
# DATABASE_URL's server), in a virtualenv made here (target/py-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
cargo build --quiet --bin memd
venv=target/py-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  -r clients/python/requirements-test.txt "./clients/python[langchain]"
(cd clients/python && "../../$venv/bin/mypy" --strict memd tests)
(cd clients/python && MEMD_BIN="$PWD/../../target/debug/memd" "../../$venv/bin/pytest" -q -p no:cacheprovider)
