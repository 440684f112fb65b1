#!/usr/bin/env bash
# Drives memd's MCP endpoint with the official MCP Inspector CLI
# (@modelcontextprotocol/inspector, --cli mode): lists the tools, then calls
# each one with real arguments and checks its answer. An interoperability
# check beside the rmcp-client tests in tests/api/mcp.rs.
#
#   ops/mcp-inspector.sh                      # own daemon on a scratch database
#   ops/mcp-inspector.sh --url URL --token T  # a running daemon (writes to T's tenant)
#
# Needs node, npm and jq. The Inspector 2.x needs Node >= 22.19; on an older
# Node this installs Node 22 from the npm registry under .cache/ (once).
set -euo pipefail
cd "$(dirname "$0")/.."

INSPECTOR_VERSION="${MCP_INSPECTOR_VERSION:-2.12.0}"
URL="" TOKEN=""
while [ $# -gt 0 ]; do
  case "$1" in
    --url) URL="$2"; shift 2 ;;
    --token) TOKEN="$2"; shift 2 ;;
    *) echo "usage: $0 [--url URL --token TOKEN]" >&2; exit 2 ;;
  esac
done

node_ok() { node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a==22&&b>=19)?0:1)' 2>/dev/null; }
if ! node_ok; then
  if [ ! -x .cache/node22/node_modules/.bin/node ]; then
    echo "== Node $(node --version 2>/dev/null || echo none) is too old for the Inspector; installing Node 22 from npm into .cache/node22"
    npm install --prefix .cache/node22 --no-audit --no-fund --loglevel=error node@22 >/dev/null
  fi
  export PATH="$PWD/.cache/node22/node_modules/.bin:$PATH"
fi

cleanup() { :; }
trap 'cleanup' EXIT
if [ -z "$URL" ]; then
  ops/ensure-postgres.sh
  cargo build --quiet --bin memd
  SERVER="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
  DB="memd_inspector_$$"
  export DATABASE_URL="${SERVER%/*}/$DB"
  target/debug/memd migrate >/dev/null 2>&1
  TOKEN=$(target/debug/memd tenant create inspector)
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  target/debug/memd serve --listen "127.0.0.1:$PORT" >/tmp/memd-inspector-$$.log 2>&1 &
  DAEMON=$!
  cleanup() {
    kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true
    psql "$SERVER" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
  }
  for _ in $(seq 100); do curl -sf "127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.1; done
  URL="http://127.0.0.1:$PORT/mcp"
fi

inspector() {
  # From / : the Inspector must not find a package.json above its cwd.
  (cd / && npm_config_loglevel=error MCP_CATALOG_PATH="${TMPDIR:-/tmp}/memd-inspector-catalog" \
    npx -y "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" --cli "$URL" \
    --header "Authorization: Bearer $TOKEN" --stored-auth-only -q "$@")
}
# call TOOL JSON-ARGS: prints the result; fails on a tool error.
call() {
  local out
  out=$(inspector --method tools/call --tool-name "$1" --tool-args-json "$2")
  if ! jq -e '.isError != true' <<<"$out" >/dev/null; then
    echo "FAIL $1: $out" >&2; exit 1
  fi
  printf '%s' "$out"
}
check() { # check NAME JQ-EXPR INPUT
  if jq -e "$2" <<<"$3" >/dev/null; then echo "ok   $1"; else echo "FAIL $1: $2 on $3" >&2; exit 1; fi
}

echo "== MCP Inspector $INSPECTOR_VERSION (node $(node --version)) against $URL"
tools=$(inspector --method tools/list)
check "tools/list: the thirteen memory tools" \
  '[.tools[].name] | sort == ["memory_build_acb","memory_correct","memory_create_handoff","memory_get_artifact","memory_handoff_inbox","memory_list_tasks","memory_list_views","memory_query_decisions","memory_record_event","memory_retract","memory_search","memory_view_append","memory_view_replace"]' "$tools"
jq -r '.tools[] | "       \(.name): \(.description[0:90])…"' <<<"$tools"

said=$(call memory_record_event '{"session_id":"inspector","text":"exports time out above 500 rows per page","actor":{"type":"human","id":"alice"}}')
check "memory_record_event (message)" '.structuredContent.event_id | startswith("evt_")' "$said"
said_id=$(jq -r .structuredContent.event_id <<<"$said")

decided=$(call memory_record_event "{\"session_id\":\"inspector\",\"kind\":\"decision\",\"refs\":[\"$said_id\"],\"content\":{\"decision\":\"export pages hold 250 rows\",\"key\":\"export.page_size\",\"scope\":\"project\",\"rationale\":[\"timeouts above 500 rows\"]}}")
check "memory_record_event (decision citing the message)" '.structuredContent.seq == 2' "$decided"

big=$(python3 -c 'import json; print(json.dumps({"session_id":"inspector","kind":"tool_result","actor":{"type":"tool","id":"fs"},"content":{"tool":"fs.read_file","path":"logs/export.log","output":"".join(f"export row {i}: ok\n" for i in range(5000))}}))')
recorded=$(call memory_record_event "$big")
check "memory_record_event (tool_result of 90 KB: whole output in an artifact)" '.structuredContent.artifact_id | startswith("art_")' "$recorded"
artifact=$(jq -r .structuredContent.artifact_id <<<"$recorded")

acb=$(call memory_build_acb '{"query_text":"which page size did we choose for exports?","consistency":"strong"}')
check "memory_build_acb (just a query): the decision is in the bundle" \
  '(.content[0].text | contains("export pages hold 250 rows")) and .structuredContent.token_used_est <= 4000' "$acb"

decisions=$(call memory_query_decisions '{"key":"export.page_size"}')
check "memory_query_decisions" ".structuredContent.decisions[0].status == \"active\" and .structuredContent.decisions[0].refs == [\"$said_id\"]" "$decisions"

task=$(call memory_record_event '{"session_id":"inspector","kind":"task_update","content":{"task_id":"export-cap","status":"doing","title":"Cap export pages"}}')
check "memory_record_event (task update)" '.structuredContent.event_id | startswith("evt_")' "$task"
found=$(call memory_search '{"query":"export page size","k":5}')
check "memory_search (the decision in force is found)" '[.structuredContent.results[].kind] | index("decision") != null' "$found"
tasks=$(call memory_list_tasks '{"status":"doing"}')
check "memory_list_tasks" '.structuredContent.tasks[0].task_id == "export-cap"' "$tasks"
views=$(call memory_list_views '{}')
check "memory_list_views (none yet)" '.structuredContent.views == []' "$views"
call memory_view_replace '{"view":"notes","text":"Exports are CSV."}' >/dev/null
call memory_view_append '{"view":"notes","text":"Pages hold 250 rows."}' >/dev/null
call memory_build_acb '{"intent":"continue","consistency":"strong"}' >/dev/null
views=$(call memory_list_views '{}')
check "memory_view_replace, then memory_view_append" '.structuredContent.views[0].text == "Exports are CSV.\nPages hold 250 rows."' "$views"

wrong=$(call memory_record_event '{"session_id":"inspector","text":"the export bucket is s3://exports-old","actor":{"type":"human","id":"alice"}}')
wrong_id=$(jq -r .structuredContent.event_id <<<"$wrong")
corrected=$(call memory_correct "{\"event_id\":\"$wrong_id\",\"content\":{\"text\":\"the export bucket is s3://exports-2026\"},\"reason\":\"renamed\"}")
check "memory_correct (a retraction and the corrected message)" \
  '(.structuredContent.retraction.event_id | startswith("evt_")) and (.structuredContent.event.event_id | startswith("evt_"))' "$corrected"
call memory_build_acb '{"intent":"continue","consistency":"strong"}' >/dev/null
found=$(call memory_search '{"query":"export bucket","k":5}')
check "memory_search finds the corrected memory, not the old one" \
  '([.structuredContent.results[].text] | map(contains("exports-2026")) | any) and ([.structuredContent.results[].text] | map(contains("exports-old")) | any | not)' "$found"
fixed_id=$(jq -r .structuredContent.event.event_id <<<"$corrected")
retracted=$(call memory_retract "{\"event_ids\":[\"$fixed_id\"],\"reason\":\"not ours to keep\"}")
check "memory_retract" '.structuredContent.event_id | startswith("evt_")' "$retracted"

page=$(call memory_get_artifact "{\"artifact_id\":\"$artifact\",\"max_bytes\":1000}")
check "memory_get_artifact (first page of $artifact)" \
  '.structuredContent.total_bytes > 65536 and .structuredContent.next_offset == 1000 and (.content[0].text | startswith("export row 0: ok"))' "$page"

handoff=$(call memory_create_handoff '{"from_agent":"planner","to_agent":"coder","task":"cap export pages at 250 rows","constraints":["no schema changes"]}')
check "memory_create_handoff" '.structuredContent.handoff_id | startswith("evt_")' "$handoff"
session=$(jq -r .structuredContent.session_id <<<"$handoff")
received=$(call memory_build_acb "{\"agent_id\":\"coder\",\"session_id\":\"$session\",\"consistency\":\"strong\"}")
check "memory_build_acb (the receiver gets the packet)" \
  '[.structuredContent.sections[].name] | index("handoff_packet") != null' "$received"

refused=$(inspector --method tools/call --tool-name memory_record_event --tool-args-json '{"session_id":"inspector","kind":"task_update","content":{"task_id":"T1","status":"maybe"}}' 2>/dev/null || true)
check "a bad argument is a tool error naming the field" '.isError == true and .structuredContent.error.field == "content.status"' "$refused"
echo "== all MCP Inspector checks passed"
