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
# The key that seals high and secret memory at rest: made once, kept outside
# the database (back it up apart from it: without it, sealed memory is lost).
if [ -z "${MEMD_KEY_FILE:-}" ]; then
  export MEMD_KEY_FILE="$PWD/.keys/memd.key"
  if [ ! -f "$MEMD_KEY_FILE" ]; then
    mkdir -p -m 700 .keys
    target/release/memd key generate --out "$MEMD_KEY_FILE"
  fi
fi
exec target/release/memd serve "$@"
