#!/bin/bash
# sched.sh BIN [LABEL]: what the scheduler does per single append with one
# writer, beside the same for the floor's raw INSERT of a log row. Runs
# `BIN bench append --seconds 8 --embedder none` against the local
# PostgreSQL and, in the middle of two of its scenarios (the floor's log
# row, then memd's single append with one writer), counts on both CPUs for
# 5 s with `perf stat -a`: context switches (sched_switch), wakeups
# (sched_wakeup), and function-call IPIs (one CPU interrupting the other,
# mostly to wake a task there). Each count is divided by the operations the
# scenario completed in those 5 s (its events/s from the report x 5).
# Output: sched-LABEL.txt here.
bin=$1; label=${2:-run}
here=$(dirname "$0"); work=$(mktemp -d)
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
events=sched:sched_switch,sched:sched_wakeup,irq_vectors:call_function_single_entry,irq_vectors:call_function_entry
"$bin" bench append --seconds 8 --embedder none --out "$work/append.md" > /dev/null 2> "$work/log" &
bench=$!
count() { # count AFTER_LINE OUT: 5 s of counts, 1.5 s into the scenario after AFTER_LINE
  until grep -q "$1" "$work/log"; do
    kill -0 $bench 2> /dev/null || { cat "$work/log"; exit 1; }
    sleep 0.2
  done
  sleep 1.5
  perf stat -a -x, -e "$events" -o "$2" -- sleep 5
}
count 'floor: HTTP round trip' "$work/floor.csv"
count 'floor: raw INSERT of a log row' "$work/memd.csv"
wait $bench
rate() { grep "^$1 *writers=1 " "$work/log" | awk '{for (i = 1; i < NF; i++) if ($(i+1) == "events/s") print $i}'; }
per_op() { # per_op CSV RATE
  awk -F, -v ops="$2" '$3 ~ /:/ { printf " | %.1f", $1 / (ops * 5) }' "$1"
}
{
  echo "# $0 $bin $label ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "Counts on both CPUs per operation, 5 s in the middle of each scenario."
  echo
  echo "| scenario | ops/s | switches | wakeups | IPIs (single) | IPIs (many) |"
  echo "|---|---:|---:|---:|---:|---:|"
  for s in "floor: raw INSERT of a log row, the log's indexes:floor.csv" "memd single append, one tenant:memd.csv"; do
    name=${s%:*}; r=$(rate "$name")
    echo "| $name | $r$(per_op "$work/${s##*:}" "$r") |"
  done
} > "$here/sched-$label.txt"
rm -rf "$work"
