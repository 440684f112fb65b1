#!/usr/bin/env bash
# Runs the whole test suite against a real PostgreSQL (started if needed).
# Each test gets its own fresh database (#[sqlx::test]), so tests run in parallel.
set -euo pipefail
cd "$(dirname "$0")/.."
ops/ensure-postgres.sh
# The embedding models for semantic retrieval, the default and the quality
# tier (once; checked by SHA-256).
ops/fetch-model.sh all
# The console's tests drive Debian's headless Chromium through chromedriver.
ops/ensure-chromium.sh
# sqlx::test creates its per-test databases through this server.
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi
# The Python and TypeScript clients, against real daemons.
ops/test-python.sh
ops/test-typescript.sh
