# Step times for the CI scripts (sourced). `step NAME COMMAND...` runs COMMAND in this shell
# (a failure ends the script under `set -e`, and the report names the step that was running)
# and appends NAME and its wall time to $STEPS_FILE; `steps_report STATUS [LABEL FILE]...`
# prints the table, then each further file's table under its label.
current_step=
current_start=0
step() {
  local name=$1
  shift
  echo "== $name"
  current_step=$name
  current_start=$SECONDS
  "$@"
  printf '%s\t%s\t0\n' "$name" "$((SECONDS - current_start))" >>"$STEPS_FILE"
  current_step=
}

# `step_status NAME COMMAND...`: the same, for a step whose failure is recorded and returned
# rather than ending the shell (a background job's).
step_status() {
  local name=$1 t0=$SECONDS status=0
  shift
  echo "== $name"
  set +e
  (
    set -e
    "$@"
  )
  status=$?
  set -e
  printf '%s\t%s\t%s\n' "$name" "$((SECONDS - t0))" "$status" >>"$STEPS_FILE"
  return "$status"
}

steps_table() {
  awk -F'\t' '{ printf "  %-58s %6d%s\n", $1, $2, ($3 != 0 ? "  FAILED (exit " $3 ")" : "") }' "$1"
}

steps_report() {
  local status=$1
  shift
  echo
  echo "== step times (wall clock, seconds)"
  [ -s "$STEPS_FILE" ] && steps_table "$STEPS_FILE"
  if [ -n "$current_step" ]; then
    printf '  %-58s %6d  FAILED\n' "$current_step" "$((SECONDS - current_start))"
  fi
  while [ $# -ge 2 ]; do
    if [ -s "$2" ]; then
      echo "$1"
      steps_table "$2"
    fi
    shift 2
  done
  printf '  %-58s %6d%s\n' "whole run" "$SECONDS" "$([ "$status" -eq 0 ] || echo "  FAILED (exit $status)")"
}
