#!/usr/bin/env bash
# How long one label waits while a PPO run trains on the same cores: the trainer's niceness switched on one run.
#
#     bash bench/latency_under_training.sh                       # 20 people pausing 2 s, trainer at nice 0 / 10 / 19
#     THINK=0 bash bench/latency_under_training.sh               # back-to-back submits: the server's throughput
#     NICES="0 10" ROUNDS=3 DURATION=60 bash bench/latency_under_training.sh
#
# A PPO run (`train ppo --set reward=function`, the app's worker started at niceness 0) trains on the shipped
# prompts in a fresh database; once it trains, bench/annotators.py measures 20 annotators over the web API for
# DURATION seconds, once per niceness in NICES, ROUNDS times, interleaved, on the same run: every thread of the
# worker and its launcher is reniced and so is their session's autogroup (Linux gives each autogroup an equal
# share whatever its processes' nice values, so both must move). The app itself runs its trainer at niceness 10
# (labeler/launcher.py lower_priority); niceness 0 is "the trainer as important as the server".
# Rows to read: p99 of the web API per niceness. Run it on a quiet machine: other sessions' processes have their
# own autogroups, which compete with the server whatever the trainer's niceness.
set -euo pipefail
cd "$(dirname "$0")/.."
THINK=${THINK:-2}
DURATION=${DURATION:-40}
ROUNDS=${ROUNDS:-2}
NICES=${NICES:-"0 10 19"}
work=$(mktemp -d)
DB=$work/studio.db
cleanup() { rlhf-studio runs cancel 1 --db "$DB" >/dev/null 2>&1 || true; }
trap cleanup EXIT
rlhf-studio prompts import-shipped --db "$DB" --create-db >/dev/null
RLHF_STUDIO_TRAINING_NICE=0 rlhf-studio train ppo --db "$DB" --set reward=function --set steps=200 \
    --set checkpoint_every=0 --runs-dir "$work/runs" >/dev/null
echo "waiting for the run to train (its log says the torch threads, then one generation)"
for _ in $(seq 1 120); do
  log=$(ls "$work"/runs/*/worker.log 2>/dev/null | head -1 || true)
  [ -n "$log" ] && grep -q "torch threads" "$log" && break
  sleep 5
done
sleep 30
renice_trainer() {
  for pid in $(pgrep -f "labeler.(worker|launcher) .*--db $DB"); do
    for thread in /proc/"$pid"/task/*; do renice -n "$1" -p "$(basename "$thread")" >/dev/null 2>&1 || true; done
    echo "$1" > /proc/"$pid"/autogroup 2>/dev/null || true
  done
}
for round in $(seq 1 "$ROUNDS"); do
  for nice in $NICES; do
    renice_trainer "$nice"
    echo "== round $round, trainer at niceness $nice; $(uptime)"
    python3 bench/annotators.py --sizes 10000 --annotators 20 --duration "$DURATION" --think "$THINK" 2>&1 \
        | grep -E "^\| +10,000 \| web|load average at the end"
  done
done
rlhf-studio runs list --db "$DB" | head -3
