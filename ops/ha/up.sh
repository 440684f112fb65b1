#!/usr/bin/env bash
# Brings up a highly available PostgreSQL on this machine: etcd, three
# PostgreSQL members under Patroni with synchronous replication (a commit is
# acknowledged only once it is on two servers), and HAProxy with a leader
# port and a replica port; then applies memd's migrations through the
# leader port. Installs patroni, etcd-server, etcd-client and haproxy from Debian's
# packages if they are missing (exit code 3 if they cannot be). Idempotent:
# what already runs is left alone. MEMD_BIN names the memd binary that
# migrates (default: target/release/memd, else target/debug/memd).
#
#   ops/ha/up.sh     then   DATABASE_URL=postgres://postgres@127.0.0.1:5440/memd
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$HA_ROOT"

install_packages() {
  # etcdctl (the health check below) is Debian's etcd-client, apart from
  # etcd-server.
  command -v patroni >/dev/null && command -v etcd >/dev/null && command -v etcdctl >/dev/null &&
    command -v haproxy >/dev/null && return 0
  echo "ha: installing patroni, etcd-server, etcd-client and haproxy" >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  { $sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq patroni etcd-server etcd-client haproxy >/dev/null; } || {
    echo "ha: patroni, etcd-server, etcd-client and haproxy cannot be installed here" >&2
    exit 3
  }
}

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

start_etcd() {
  pid_alive "$HA_DIR/etcd.pid" && return 0
  mkdir -p "$HA_DIR/etcd"
  # The package's unit would start etcd on its default ports; this one is
  # the cluster's own.
  etcd --name memd-ha --data-dir "$HA_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "memd-ha=http://127.0.0.1:$ETCD_PEER_PORT" \
    >"$HA_DIR/etcd.log" 2>&1 &
  echo $! >"$HA_DIR/etcd.pid"
  for _ in $(seq 1 100); do
    ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$ETCD_PORT" endpoint health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "ha: etcd did not start (see $HA_DIR/etcd.log)" >&2
  exit 1
}

member_config() {
  local n=$1 pg api
  pg=$(member_pg_port "$n")
  api=$(member_api_port "$n")
  cat <<YAML
scope: $SCOPE
name: pg$n
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:$api
  connect_address: 127.0.0.1:$api
etcd3:
  hosts: 127.0.0.1:$ETCD_PORT
bootstrap:
  dcs:
    # The leader key lives 10 s; members look every second. A leader whose
    # PostgreSQL crashes hands over at once (primary_start_timeout 0)
    # rather than restarting in place: synchronous_mode makes that safe.
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    primary_start_timeout: 0
    synchronous_mode: true
    maximum_lag_on_failover: 1048576
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 300
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        synchronous_commit: "on"
  initdb:
    - encoding: UTF8
    - data-checksums
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$pg
  connect_address: 127.0.0.1:$pg
  data_dir: $HA_DIR/pg$n/data
  bin_dir: $(bindir)
  pgpass: $HA_DIR/pg$n/pgpass
  authentication:
    superuser: {username: postgres}
    replication: {username: postgres}
    rewind: {username: postgres}
  parameters:
    unix_socket_directories: $HA_DIR/pg$n
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
YAML
}

start_member() {
  local n=$1
  pid_alive "$HA_DIR/pg$n/patroni.pid" && return 0
  mkdir -p "$HA_DIR/pg$n"
  member_config "$n" >"$HA_DIR/pg$n/patroni.yml"
  [ "$(id -u)" = 0 ] && chown -R postgres: "$HA_DIR/pg$n"
  # The pid file names Patroni itself (not runuser around it): stopping
  # Patroni stops its PostgreSQL.
  as_postgres sh -c 'echo $$ >"$1/patroni.pid"; exec patroni "$1/patroni.yml"' sh "$HA_DIR/pg$n" \
    >>"$HA_DIR/pg$n/patroni.log" 2>&1 &
  for _ in $(seq 1 50); do [ -s "$HA_DIR/pg$n/patroni.pid" ] && break; sleep 0.1; done
}

haproxy_config() {
  cat <<CFG
global
  maxconn 2000
defaults
  mode tcp
  timeout connect 2s
  timeout client 1h
  timeout server 1h
  timeout check 1s
  # A member marked down has its sessions cut at once, so clients
  # reconnect to the new leader instead of waiting on a dead socket.
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
listen stats
  mode http
  bind 127.0.0.1:$HAPROXY_STATS_PORT
  stats enable
  stats uri /
listen leader
  bind 127.0.0.1:$LEADER_PORT
  option httpchk
  http-check send meth GET uri /primary
  http-check expect status 200
$(for n in "${MEMBERS[@]}"; do echo "  server pg$n 127.0.0.1:$(member_pg_port "$n") check port $(member_api_port "$n")"; done)
listen replicas
  bind 127.0.0.1:$REPLICA_PORT
  balance roundrobin
  option httpchk
  http-check send meth GET uri /replica
  http-check expect status 200
$(for n in "${MEMBERS[@]}"; do echo "  server pg$n 127.0.0.1:$(member_pg_port "$n") check port $(member_api_port "$n")"; done)
CFG
}

start_haproxy() {
  pid_alive "$HA_DIR/haproxy.pid" && return 0
  haproxy_config >"$HA_DIR/haproxy.cfg"
  haproxy -D -f "$HA_DIR/haproxy.cfg" -p "$HA_DIR/haproxy.pid"
}

wait_for() {
  local what=$1 seconds=$2
  shift 2
  for _ in $(seq 1 $((seconds * 10))); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "ha: $what not within $seconds s (logs in $HA_DIR)" >&2
  exit 1
}

replicas_streaming() {
  [ "$(psql -h 127.0.0.1 -p "$LEADER_PORT" -U postgres -Atc \
    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')")" -ge 1 ] &&
    [ "$(psql -h 127.0.0.1 -p "$LEADER_PORT" -U postgres -Atc \
      "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" -eq $((${#MEMBERS[@]} - 1)) ]
}

install_packages
mkdir -p "$HA_DIR"
start_etcd
for n in "${MEMBERS[@]}"; do start_member "$n"; done
start_haproxy
wait_for "a leader" 120 pg_isready -q -h 127.0.0.1 -p "$LEADER_PORT" -U postgres
wait_for "two streaming replicas, one synchronous" 180 replicas_streaming
psql -h 127.0.0.1 -p "$LEADER_PORT" -U postgres -Atqc "SELECT 1 FROM pg_database WHERE datname = 'memd'" | grep -q 1 ||
  psql -h 127.0.0.1 -p "$LEADER_PORT" -U postgres -qc "CREATE DATABASE memd"
memd=${MEMD_BIN:-target/release/memd}
[ -x "$memd" ] || memd=target/debug/memd
if [ -x "$memd" ]; then
  "$memd" --database-url "postgres://postgres@127.0.0.1:$LEADER_PORT/memd" migrate >&2
else
  echo "ha: no memd binary built yet; run 'memd migrate' against the leader port" >&2
fi
"$(dirname "$0")/status.sh"
