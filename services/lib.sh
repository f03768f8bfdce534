# shellcheck shell=bash
# Helpers shared by services/*/start.sh and stop.sh (sourced, not run).
# Every engine keeps its pid file, log and data under <repo>/.services/<name>/.

SERVICES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SERVICES_DIR/.." && pwd)
STATE_ROOT="$REPO_ROOT/.services"

log() { echo "$SVC_NAME: $*" >&2; }
die() { log "$*"; exit 1; }

# svc_init NAME: sets SVC_NAME, SVC_DIR, SVC_PID, SVC_LOG and creates the dir.
svc_init() {
  SVC_NAME=$1
  SVC_DIR="$STATE_ROOT/$1"
  SVC_PID="$SVC_DIR/$1.pid"
  SVC_LOG="$SVC_DIR/$1.log"
  mkdir -p "$SVC_DIR"
}

# svc_lock: serialises start/stop of one engine across concurrent callers.
# The fd is closed in the launched engine (see svc_launch) so the lock is
# released when this script exits.
svc_lock() {
  exec 9>"$SVC_DIR/.lock"
  flock -w 300 9 || die "could not take $SVC_DIR/.lock"
}

# svc_pid: prints the recorded pid if that process is alive and still ours
# (its command line contains $SVC_MATCH), else nothing; guards against reuse.
svc_pid() {
  [[ -f $SVC_PID ]] || return 0
  local pid
  pid=$(<"$SVC_PID")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  proc_alive "$pid" || return 0
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$SVC_MATCH" && echo "$pid"
  return 0
}

# proc_alive PID: true while PID runs (a zombie awaiting its reaper counts as gone).
proc_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# wait_until SECONDS CMD...: polls CMD until it succeeds; fails on timeout or
# when the engine process has died (no point waiting for it then).
wait_until() {
  local limit=$1
  shift
  local deadline=$((SECONDS + limit))
  until "$@"; do
    if [[ -z $(svc_pid) ]]; then
      log "process exited during startup; last log lines:"
      tail -n 40 "$SVC_LOG" >&2 || true
      return 1
    fi
    if ((SECONDS >= deadline)); then
      log "not ready after ${limit}s; last log lines:"
      tail -n 40 "$SVC_LOG" >&2 || true
      return 1
    fi
    sleep 0.5
  done
}

# svc_launch CMD...: starts CMD detached in its own session (so a Ctrl-C in
# the caller's terminal does not reach it and stop can signal the whole
# process group), appending output to the log and recording its pid.
svc_launch() {
  rm -f "$SVC_PID"
  echo "---- $(date -u +%FT%TZ) start: $*" >>"$SVC_LOG"
  # The inner shell writes its own pid, then execs: the pid is the engine's.
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$SVC_PID" "$@" \
    </dev/null >>"$SVC_LOG" 2>&1 9>&- &
  local deadline=$((SECONDS + 10))
  until [[ -s $SVC_PID ]]; do
    ((SECONDS < deadline)) || die "engine did not record its pid"
    sleep 0.1
  done
}

# svc_stop [GRACE_SECONDS]: TERM the engine's process group, wait, then KILL.
# Also drops the mark test runs leave on engines they started
# (test/setup/engines.ts), so a later hand-started engine is not theirs.
svc_stop() {
  local grace=${1:-30} pid
  rm -f "$SVC_DIR/started-by-tests"
  pid=$(svc_pid)
  if [[ -z $pid ]]; then
    rm -f "$SVC_PID"
    log "not running"
    return 0
  fi
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + grace))
  while proc_alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
  if proc_alive "$pid"; then
    log "still running after ${grace}s; killing"
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    while proc_alive "$pid"; do sleep 0.1; done
  fi
  rm -f "$SVC_PID"
  log "stopped (pid $pid)"
}

# Exits when the engine needs no start: "running" when this checkout's process is up (after
# waiting until it answers), "external" when something else already answers on the port.
# Usage: svc_reuse_existing PORT WAIT_SECONDS WHAT  (WHAT names the engine in messages;
# the caller defines `answers`).
svc_reuse_existing() {
  local port=$1 wait=$2 what=$3
  if [[ -n $(svc_pid) ]]; then
    wait_until "$wait" answers
    echo running
    exit 0
  fi
  if port_open 127.0.0.1 "$port"; then
    answers || die "port $port is taken by something that is not $what"
    log "$what not started here already answers on $port; using it"
    echo external
    exit 0
  fi
}
