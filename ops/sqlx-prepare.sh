#!/usr/bin/env bash
# Regenerates .sqlx/, the metadata of the fixed SQL statements that
# `sqlx::query!` and `query_as!` check at compile time. Builds read it
# offline (.cargo/config.toml forces SQLX_OFFLINE), so they need no
# database; run this after changing such a statement or the schema, and
# commit .sqlx/ with the change.
#
# It applies migrations/ to a scratch database with psql (the daemon that
# would run them is what is being compiled), then compiles the workspace
# against it, each macro writing its statement's metadata.
set -euo pipefail
cd "$(dirname "$0")/.."
ops/ensure-postgres.sh
base="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
scratch="memd_sqlx_prepare"
url="${base%/*}/$scratch"
export PGOPTIONS="-c client_min_messages=warning"
psql -q "$base" -c "DROP DATABASE IF EXISTS $scratch" -c "CREATE DATABASE $scratch"
for migration in migrations/*.sql; do
  psql -q -v ON_ERROR_STOP=1 "$url" -f "$migration" >/dev/null
done
# The projectors' statements name their tables without a schema: they run
# under a search path whose first schema is `projections` (or a drift
# check's shadow copy of it). No table name is in both schemas, so the
# live one checks them.
psql -q "$base" -c "ALTER DATABASE $scratch SET search_path TO projections, public"
# Dependencies first, offline: apalis-postgres checks its own statements
# against its own .sqlx data, and would fail against this database, which
# has none of its tables; compiled now, it is not compiled again below, and
# only the workspace's crates expand their macros online. (Their offline
# check may fail here, when .sqlx is stale: that is what this script fixes.)
cargo check --workspace --all-targets --quiet --keep-going 2>/dev/null || true
rm -rf .sqlx
mkdir .sqlx
# Touching each crate's root makes cargo expand every macro again.
touch src/lib.rs core/src/lib.rs embedder/src/lib.rs projectors/src/lib.rs lab/src/main.rs
SQLX_OFFLINE_DIR="$PWD/.sqlx" DATABASE_URL="$url" \
  cargo check --workspace --all-targets --quiet \
  --config 'env.SQLX_OFFLINE.value="false"' --config 'env.SQLX_OFFLINE.force=true'
psql -q "$base" -c "DROP DATABASE $scratch"
echo "sqlx-prepare: $(ls .sqlx | wc -l) statements in .sqlx/"
