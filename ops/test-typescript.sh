#!/usr/bin/env bash
# The TypeScript client's tests (clients/typescript): tsc --strict, then
# node's test runner against real daemons (target/debug/memd on fresh
# databases of DATABASE_URL's server). Node.js is the machine's (20 or
# later); the packages come from the npm registry, pinned by the lockfile.
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' 2>/dev/null; then
  echo "test-typescript: needs Node.js 20 or later (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
cargo build --quiet --bin memd
cd clients/typescript
npm ci --no-audit --no-fund --loglevel=error
MEMD_BIN="$PWD/../../target/debug/memd" npm test
