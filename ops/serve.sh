#!/usr/bin/env bash
# Builds memd and runs the daemon on 127.0.0.1:7070 (MEMD_LISTEN overrides),
# against the database memd on the local PostgreSQL (DATABASE_URL overrides),
# starting PostgreSQL first if it is not running. Extra arguments go to `memd serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
ops/ensure-postgres.sh
# The embedding model for semantic retrieval (once; checked by SHA-256).
ops/fetch-model.sh
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/memd}"
cargo build --release --quiet --bin memd
exec target/release/memd serve "$@"
