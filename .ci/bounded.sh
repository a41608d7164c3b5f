# Sourced by .ci/run. `bounded SECONDS LABEL COMMAND...` runs COMMAND (with TEST_PROGRESS_FILE set,
# so vitest logs each file and test it begins: test/support/progress-reporter.ts). A command still
# running after SECONDS is a hang: what was running is printed (test files begun and not ended
# with the last test begun in each, the process tree with CPU time, where each Node.js process's
# JavaScript was and which handles kept it alive (a diagnostic report each writes on SIGURG,
# enabled through NODE_OPTIONS for the step), PostgreSQL's sessions), the command and
# everything it started are killed, and the step fails with 124. CI then ends red within its own
# limit and says what hung, instead of being cut off at 90 minutes with nothing to go on.

descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$child"
    descendants "$child"
  done
}

# hang_report PROGRESS REPORTS PID...: the step's pids, its own first.
hang_report() {
  local progress=$1 reports=$2 p
  shift 2
  if [ -s "$progress" ]; then
    echo "-- test files begun and not ended, with the last test begun in each:"
    awk -F'\t' '$2 == "start" { s[$3] = $1 } $2 == "end" { delete s[$3] } $2 == "test" { t[$3] = $1 " " $4 }
      END { for (f in s) print "   " f " (began " s[f] "; last test begun: " t[f] ")" }' "$progress"
    echo "-- the last lines of the progress log:"
    tail -n 5 "$progress" | sed 's/^/   /' || true
  fi
  echo "-- its processes (pid ppid seconds cpu-time state rss command):"
  ps -o pid,ppid,etimes,time,stat,rss,args --forest -p "$(echo "$@" | tr ' ' ',')" | cut -c1-240 | head -n 80 || true
  echo "-- its Node.js processes: JavaScript stack and active handles (diagnostic reports):"
  for p in "$@"; do
    if [ "$(ps -o comm= -p "$p" 2>/dev/null)" = node ]; then kill -URG "$p" 2>/dev/null || true; fi
  done
  sleep 3
  timeout 20 node .ci/node-reports.mjs "$reports" 2>&1 | head -n 150 || true
  echo "-- PostgreSQL sessions not idle:"
  timeout 10 psql "${CI_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}" -Atc \
    "SELECT pid, datname, state, wait_event_type, wait_event, now() - xact_start, regexp_replace(left(query, 200), '\s+', ' ', 'g') FROM pg_stat_activity WHERE backend_type = 'client backend' AND state <> 'idle' AND pid <> pg_backend_pid()" 2>&1 | head -n 40 || true
}

bounded() {
  local limit=$1 label=$2
  shift 2
  local progress reports rc=0 waited=0 pid pids
  progress=$(mktemp)
  reports=$(mktemp -d)
  TEST_PROGRESS_FILE=$progress NODE_OPTIONS="${NODE_OPTIONS:+$NODE_OPTIONS }--report-on-signal --report-signal=SIGURG --report-directory=$reports" "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge "$limit" ]; then
      echo "== HANG: $label still running after ${limit} s; what was running:"
      pids="$pid $(descendants "$pid")"
      # The report is best effort: nothing in it may stop the kill below.
      # shellcheck disable=SC2086
      hang_report "$progress" "$reports" $pids || true
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      sleep 5
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      rm -rf "$progress" "$reports"
      echo "== $label: stopped after ${limit} s"
      return 124
    fi
    sleep 2
    waited=$((waited + 2))
  done
  wait "$pid" || rc=$?
  rm -rf "$progress" "$reports"
  return "$rc"
}
