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
# The schema and the grants, as the database's owner (DATABASE_URL); then the
# daemon logs in as memd_app, a role that can append and project but never
# rewrite the log (docs/security.md, Audit). MEMD_DAEMON_DATABASE_URL overrides its URL
# (by default DATABASE_URL with the user memd_app: set it when the server
# asks memd_app for a password).
target/release/memd migrate
# Prometheus metrics on their own port (docs/operations.md); localhost
# only unless MEMD_METRICS_LISTEN says otherwise.
export MEMD_METRICS_LISTEN="${MEMD_METRICS_LISTEN:-127.0.0.1:7071}"
DAEMON_DATABASE_URL="${MEMD_DAEMON_DATABASE_URL:-$(printf '%s' "$DATABASE_URL" | sed -E 's#^(postgres(ql)?://)([^@/]*@)?#\1memd_app@#')}"
exec target/release/memd serve --database-url "$DAEMON_DATABASE_URL" "$@"
