#!/bin/bash
# run.sh NAME PORT: a fresh database, a daemon of /tmp/memd-NAME, 8 agents x 60 turns
set -e
name=$1; port=$2
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/memd_turns_$name
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS memd_turns_$name"
/tmp/memd-$name migrate >/dev/null 2>&1 || true
/tmp/memd-$name serve --listen 127.0.0.1:$port --embedder none > /tmp/turns/serve-$name.log 2>&1 &
pid=$!
until curl -sf http://127.0.0.1:$port/readyz >/dev/null; do sleep 0.5; done
token=$(/tmp/memd-$name tenant create acme)
python3 /tmp/turns/turns.py http://127.0.0.1:$port "$token" /tmp/turns/$name.json
kill $pid; wait $pid || true
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS memd_turns_$name"
