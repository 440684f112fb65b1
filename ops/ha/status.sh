#!/usr/bin/env bash
# What the HA cluster looks like now: members, roles, lag, and the ports.
set -euo pipefail
source "$(dirname "$0")/common.sh"
echo "leader port 127.0.0.1:$LEADER_PORT, replica port 127.0.0.1:$REPLICA_PORT, etcd 127.0.0.1:$ETCD_PORT, HAProxy stats http://127.0.0.1:$HAPROXY_STATS_PORT/"
if [ -s "$HA_DIR/pg1/patroni.yml" ]; then
  patronictl -c "$HA_DIR/pg1/patroni.yml" list 2>/dev/null || echo "patronictl: no answer (is etcd up?)"
else
  echo "no cluster in $HA_DIR (run ops/ha/up.sh)"
fi
