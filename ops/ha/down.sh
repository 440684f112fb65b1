#!/usr/bin/env bash
# Stops everything ops/ha/up.sh started (HAProxy, the Patroni members and
# their PostgreSQL servers, etcd) and, with --purge, deletes their data.
set -euo pipefail
source "$(dirname "$0")/common.sh"

stop_pid() {
  local file=$1
  pid_alive "$file" || { rm -f "$file"; return 0; }
  local pid
  pid=$(cat "$file")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || { rm -f "$file"; return 0; }; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

stop_pid "$HA_DIR/haproxy.pid"
# Patroni stops its PostgreSQL when it stops.
for n in "${MEMBERS[@]}"; do stop_pid "$HA_DIR/pg$n/patroni.pid"; done
# A PostgreSQL whose Patroni was killed outright is stopped here.
for n in "${MEMBERS[@]}"; do
  data="$HA_DIR/pg$n/data"
  if [ -s "$data/postmaster.pid" ]; then
    pid=$(head -n 1 "$data/postmaster.pid")
    kill -0 "$pid" 2>/dev/null && kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
done
stop_pid "$HA_DIR/etcd.pid"
if [ "${1:-}" = "--purge" ]; then
  rm -rf "$HA_DIR"
fi
