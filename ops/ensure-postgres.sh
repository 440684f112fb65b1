#!/usr/bin/env bash
# Makes sure PostgreSQL answers on 127.0.0.1:5432 (user postgres, trust auth).
# - already running: nothing to do;
# - a Debian cluster installed but stopped: start it with pg_ctlcluster;
# - server binaries but no cluster: create a private one under .pgdata/;
# - no server at all: install Debian's postgresql package (needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
HOST=127.0.0.1
PORT=5432

ready() { pg_isready -q -h "$HOST" -p "$PORT" >/dev/null 2>&1; }
wait_ready() {
  for _ in $(seq 1 60); do ready && return 0; sleep 0.5; done
  return 1
}
as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

command -v pg_isready >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; }
ready && exit 0

if command -v pg_lsclusters >/dev/null 2>&1 && [ -n "$(pg_lsclusters -h 2>/dev/null)" ]; then
  while read -r version cluster _; do
    echo "ensure-postgres: starting cluster $version/$cluster" >&2
    pg_ctlcluster --skip-systemctl-redirect "$version" "$cluster" start >&2 || true
  done < <(pg_lsclusters -h)
  wait_ready && exit 0
fi

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bindir" ]; then
  echo "ensure-postgres: installing PostgreSQL" >&2
  apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
  exec "$0"
fi

data="$PWD/.pgdata"
if [ ! -s "$data/PG_VERSION" ]; then
  echo "ensure-postgres: creating a private cluster in $data" >&2
  mkdir -p "$data"
  [ "$(id -u)" = 0 ] && chown postgres: "$data"
  as_postgres "$bindir/initdb" -D "$data" -U postgres --auth=trust >/dev/null
fi
echo "ensure-postgres: starting the private cluster in $data" >&2
as_postgres "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w \
  -o "-p $PORT -c listen_addresses=$HOST -k /tmp" start >&2
wait_ready
