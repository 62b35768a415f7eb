#!/usr/bin/env bash
# Two revisions' ingest side by side: both servers run at the same time, each with its own database
# and its own wrk, so the machine's swings (bench/README.md) hit both alike. Sequential runs minutes
# apart differ by more than most single changes do.
#
#   bench/versus.sh REV_A REV_B [ENGINE] [ROUNDS] [SENDERS]
#   bench/versus.sh 0655b65 HEAD postgresql 4 16
#
# ENGINE: sqlite or postgresql (default; SWITCHBOARD_BENCH_DATABASE_URL names the server). SENDERS:
# per revision (default 16, so 32 in all). Prints one line per revision and round. Compare the
# server's CPU per delivery first: with both servers on the same cores, each one's rate also
# depends on the other's.
set -euo pipefail
a=${1:?revision A}; b=${2:?revision B}; engine=${3:-postgresql}; rounds=${4:-3}; senders=${5:-16}
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for rev in "$a" "$b"; do
  mkdir -p "$work/$rev"
  git -C "$root" archive "$rev" | tar -x -C "$work/$rev"
done
run() {
  (cd "$work/$1" && "$python" -m bench.ingest --db "$engine" --no-ceiling --senders "$senders" --rules 0 \
    --deliveries 40000 --seconds 30) 2>&1 | grep "server=switchboard" |
    grep -o "per_second=[0-9.]*\|p50_ms=[0-9.]*\|server_cpu_ms_per_request=[0-9.]*" | tr '\n' ' '
}
for round in $(seq 1 "$rounds"); do
  run "$a" > "$work/a.txt" & run "$b" > "$work/b.txt" &
  wait
  echo "round $round  $a: $(cat "$work/a.txt")"
  echo "round $round  $b: $(cat "$work/b.txt")"
done
