#!/usr/bin/env bash
# Stops what .ci/slurm.sh started, by pid file (no systemd here).
for f in /run/slurmd.pid /run/slurmctld.pid; do
  [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
done
for _ in $(seq 40); do
  pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || break
  sleep 0.25
done
rm -f /run/slurmd.pid /run/slurmctld.pid
