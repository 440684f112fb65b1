#!/usr/bin/env bash
# Makes a hot standby of the PostgreSQL server at 127.0.0.1:5432: a base
# backup (pg_basebackup -R, which also writes the standby's connection to
# its primary) into a second cluster, started on its own port and
# streaming from then on. For running memd serve --read-database-url on
# this machine; the tests make a private primary and standby of their own.
#
#   ops/make-standby.sh [--allow-replication] [PORT (5433)] [DATA_DIR (.pgstandby)]
#
# The primary must accept replication connections from 127.0.0.1 for the
# user postgres. If it does not, the script stops and says so; with
# --allow-replication it adds that one line to the primary's pg_hba.conf,
# with the authentication method the primary already uses for 127.0.0.1
# (a replication connection reads every tenant's data), and reloads it.
# Stop the standby with
#   pg_ctl -D .pgstandby stop   (as the postgres user)
set -euo pipefail
cd "$(dirname "$0")/.."
ALLOW=0
if [ "${1:-}" = "--allow-replication" ]; then ALLOW=1; shift; fi
PORT="${1:-5433}"
DATA="${2:-$PWD/.pgstandby}"
PRIMARY="host=127.0.0.1 port=5432 user=postgres"

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

ops/ensure-postgres.sh
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
[ -n "$bindir" ] || { echo "make-standby: no PostgreSQL server programs found" >&2; exit 1; }

if pg_isready -q -h 127.0.0.1 -p "$PORT"; then
  echo "make-standby: a server already answers on 127.0.0.1:$PORT" >&2
  exit 0
fi

if ! psql "$PRIMARY replication=true dbname=postgres" -Atc IDENTIFY_SYSTEM >/dev/null 2>&1; then
  hba=$(psql "$PRIMARY dbname=postgres" -Atc "SHOW hba_file")
  if [ "$ALLOW" != 1 ]; then
    echo "make-standby: the primary refuses replication connections from 127.0.0.1;" \
      "allow them in $hba (or run with --allow-replication)" >&2
    exit 1
  fi
  method=$(psql "$PRIMARY dbname=postgres" -Atc \
    "SELECT auth_method FROM pg_hba_file_rules
      WHERE type = 'host' AND 'all' = ANY (database) AND address = '127.0.0.1' LIMIT 1")
  method="${method:-scram-sha-256}"
  line="host replication postgres 127.0.0.1/32 $method"
  if ! grep -qxF "$line" "$hba"; then
    echo "make-standby: adding to $hba: $line" >&2
    echo "$line" >>"$hba"
  fi
  psql "$PRIMARY dbname=postgres" -Atc "SELECT pg_reload_conf()" >/dev/null
fi

if [ ! -s "$DATA/PG_VERSION" ]; then
  echo "make-standby: base backup of 127.0.0.1:5432 into $DATA" >&2
  mkdir -p "$DATA"
  chmod 700 "$DATA"
  [ "$(id -u)" = 0 ] && chown postgres: "$DATA"
  as_postgres "$bindir/pg_basebackup" -h 127.0.0.1 -p 5432 -U postgres -D "$DATA" -R -X stream
  # Debian keeps a cluster's configuration outside its data directory, so
  # the backup of one has none: give the standby the little it needs.
  for file in postgresql.conf pg_ident.conf; do
    [ -e "$DATA/$file" ] || as_postgres touch "$DATA/$file"
  done
  [ -e "$DATA/pg_hba.conf" ] ||
    printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' | as_postgres tee "$DATA/pg_hba.conf" >/dev/null
fi

# A hot standby refuses to start with less of these than its primary has.
settings=""
for name in max_connections max_worker_processes max_wal_senders max_prepared_transactions max_locks_per_transaction; do
  settings="$settings -c $name=$(psql "$PRIMARY dbname=postgres" -Atc "SHOW $name")"
done
echo "make-standby: starting the standby on 127.0.0.1:$PORT" >&2
as_postgres "$bindir/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
  -o "-p $PORT -c listen_addresses=127.0.0.1 -c hot_standby=on -k /tmp$settings" start >&2
echo "make-standby: ready; memd serve --read-database-url postgres://postgres@127.0.0.1:$PORT/memd" >&2
