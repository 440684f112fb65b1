#!/bin/bash
# perf-single.sh BIN [EXTRA BENCH ARGS]: where the CPU goes while one writer
# appends single events. Runs `BIN bench append --seconds 12 --embedder none`
# against the local PostgreSQL and, while memd's first scenario (single
# append, one tenant, one writer) runs, samples every CPU with perf
# (cpu-clock, 9 s). Output: perf-single.txt here (PERF_OUT=FILE elsewhere):
# the share of samples by process and library, and the top symbols.
# CALL_GRAPH=1 also records call graphs (DWARF unwinding, 499 Hz instead of
# 999) and adds each function's inclusive share: PostgreSQL's, and named
# parts of the bench process (the daemon's projection steps, HTTP, its
# appends, tokenizing, the kernel's TCP send path). PERF_DATA=FILE keeps
# perf's samples there.
bin=$1; shift
here=$(dirname "$0"); work=$(mktemp -d)
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
"$bin" bench append --seconds 12 --embedder none --out "$work/append.md" "$@" > /dev/null 2> "$work/log" &
bench=$!
# The scenario just before memd's first: the floor rows in builds that have them.
if grep -q 'floor: raw INSERT of a log row' "$bin"; then before='floor: raw INSERT of a log row'
else before='raw INSERT, multi-row .*writers=8'; fi
until grep -q "$before" "$work/log"; do
  kill -0 $bench 2> /dev/null || { cat "$work/log"; exit 1; }
  sleep 0.2
done
sleep 1.5
data=${PERF_DATA:-$work/perf.data}
if [ -n "$CALL_GRAPH" ]; then sampling="-F 499 --call-graph dwarf,16384"; else sampling="-F 999"; fi
perf record -q -a $sampling -o "$data" -- sleep 9 2> /dev/null
wait $bench
flat() { # flat SORT [LIMIT]
  perf report -i "$data" --stdio --no-children --sort "$1" -g none 2> /dev/null |
    grep -v '^#' | grep -v '^$' | cut -c1-160 | head -"${2:-15}"
}
inclusive() { # inclusive COMM
  perf report -i "$data" --stdio --children --comm "$1" --sort sym -g none --percent-limit 0.1 2> /dev/null |
    grep -v '^#' | grep -v '^$' | cut -c1-150
}
{
  echo "# $0 $bin $* ($(date -u '+%Y-%m-%d %H:%M UTC'))${CALL_GRAPH:+, CALL_GRAPH=1}"
  grep 'single append, one tenant *writers=1 ' "$work/log"
  echo
  echo "## samples by process (% of all samples of both CPUs; swapper = idle)"
  flat comm 8
  echo
  echo "## samples by process and library"
  flat comm,dso 16
  echo
  echo "## top symbols (self)"
  flat comm,dso,sym 60
  if [ -n "$CALL_GRAPH" ]; then
    echo
    echo "## PostgreSQL: inclusive share of all samples, functions above 1% (its own symbols; addresses left out)"
    inclusive postgres | awk '$1+0 >= 1' | grep -v ' 0x0000\|_start$\|main$\|__libc_start' | head -60
    echo
    echo "## bench process (clients and daemon): inclusive share of all samples of named frames"
    inclusive tokio-rt-worker | grep -E '\] (memd_projectors::engine::Engine::step_at_most|memd_projectors::runtime::work|memd::write::group_commit::run_writer|memd::calls::events::record|memd::domain::event::NewEvent::parse|memd::domain::redact::Redactor::redact$|memd::write::append::Batch::build|hyper::proto::h1::dispatch::Dispatcher<D,Bs,I,T>::poll_write|reqwest::async_impl::client::Client::execute_request|tiktoken_rs::patched_tiktoken::.*count_ordinary|memd::invalidation::listen|tcp_sendmsg$|tcp_recvmsg$)'
  fi
} > "${PERF_OUT:-$here/perf-single.txt}"
rm -rf "$work"
