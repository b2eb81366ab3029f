#!/usr/bin/env bash
# Stops what .ci/gridengine.sh started.
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
qconf -ke "$(hostname)" >/dev/null 2>&1 || true
qconf -km >/dev/null 2>&1 || true
for _ in $(seq 40); do
  pgrep -x sge_qmaster >/dev/null || pgrep -x sge_execd >/dev/null || break
  sleep 0.25
done
