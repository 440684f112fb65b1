# Shared settings of the ops/ha scripts (sourced, not run).
#
# One machine plays a whole highly available PostgreSQL: a single-node etcd
# (the leader lock), three PostgreSQL members under Patroni, and HAProxy in
# front. Everything lives under $HA_DIR (the repository's ignored .ha/ by
# default) and listens on 127.0.0.1 only; every port derives from
# MEMD_HA_PORT so a second cluster can run beside the first.
HA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HA_DIR="${MEMD_HA_DIR:-$HA_ROOT/.ha}"
HA_PORT="${MEMD_HA_PORT:-5440}"
# HAProxy: the leader port (writes) and the replica port (reads).
LEADER_PORT=$HA_PORT
REPLICA_PORT=$((HA_PORT + 1))
HAPROXY_STATS_PORT=$((HA_PORT + 2))
# etcd: client and peer ports.
ETCD_PORT=$((HA_PORT + 3))
ETCD_PEER_PORT=$((HA_PORT + 4))
# Member n (1..3): PostgreSQL on HA_PORT+10+n, Patroni's REST API on
# HA_PORT+20+n.
MEMBERS=(1 2 3)
member_pg_port() { echo $((HA_PORT + 10 + $1)); }
member_api_port() { echo $((HA_PORT + 20 + $1)); }
SCOPE=memd

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
