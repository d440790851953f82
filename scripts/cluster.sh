#!/usr/bin/env bash
# The scaled-out topology of docker-compose.yml, started natively on this machine from
# packages only, every service bound to 127.0.0.1 (README.md, "Scaling out";
# docs/how-to/scale-out.md):
#
#   PostgreSQL (Debian's postgresql: databases mlflow, optuna, airflow; generated password)
#   MLflow tracking server on Postgres, --serve-artifacts (artifacts in a local folder)
#   Spark standalone master + 2 workers (PySpark's own launch classes, 1 core each)
#   Airflow 3, LocalExecutor on Postgres: api-server, scheduler, dag-processor
#
#   scripts/cluster.sh up        start everything, wait for each health endpoint, write
#                                $FLASHML_CLUSTER_DIR/cluster.env (the client's variables)
#   scripts/cluster.sh down      stop exactly what `up` started (recorded PIDs); no process
#                                and no port left behind
#   scripts/cluster.sh status    each service: PID, port, health (exit 0 when all are up)
#   scripts/cluster.sh test      a smoke check of every service through the client's
#                                variables (starts and stops the cluster when it was not up)
#   scripts/cluster.sh stop SERVICE [--kill]
#                                stop one service of a running cluster (its process tree;
#                                --kill: SIGKILL at once, as a crash or a lost machine)
#   scripts/cluster.sh start SERVICE
#                                start it again as `up` did, wait for its health check
#   SERVICE: postgres mlflow spark-master spark-worker-N airflow-apiserver airflow-scheduler
#            airflow-dag-processor
#
# Then: `set -a; . .flashml/cluster/cluster.env; set +a; flashml pipeline run ...`.
#
# Settings (environment): FLASHML_CLUSTER_DIR (state: default <repo>/.flashml/cluster),
# FLASHML_CLUSTER_<SERVICE>_PORT for PG, MLFLOW, SPARK, SPARK_UI, AIRFLOW (default: a free
# port each), FLASHML_CLUSTER_WORKERS (2), FLASHML_CLUSTER_WORKER_MEMORY (2g),
# FLASHML_CLUSTER_TIMEOUT (seconds per service, 180), FLASHML_RETRAIN_SCHEDULE (@daily).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
VENV=${FLASHML_VENV:-$REPO/.venv}
PY=$VENV/bin/python
STATE=${FLASHML_CLUSTER_DIR:-$REPO/.flashml/cluster}
case $STATE in /*) ;; *) STATE=$(pwd)/$STATE ;; esac
WORKERS=${FLASHML_CLUSTER_WORKERS:-2}
WORKER_MEMORY=${FLASHML_CLUSTER_WORKER_MEMORY:-2g}
TIMEOUT=${FLASHML_CLUSTER_TIMEOUT:-180}
PIDS=$STATE/pids
LOGS=$STATE/logs
ENV_FILE=$STATE/cluster.env
# the order `up` starts services in; `down` stops them in reverse
SERVICES=(postgres mlflow spark-master)
for ((i = 1; i <= WORKERS; i++)); do SERVICES+=("spark-worker-$i"); done
SERVICES+=(airflow-apiserver airflow-scheduler airflow-dag-processor)

say() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: error: %s\n' "$*" >&2; exit 1; }

# --- processes -------------------------------------------------------------------------------
# A PID file holds "<pid> <start time in clock ticks>": a PID reused by another process after
# ours ended does not match, so `down` never signals a stranger.
proc_start() { awk '{ sub(/^.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null; }
recorded_pid() {  # the live PID recorded for service $1, else nothing
  local f=$PIDS/$1.pid pid start
  [ -f "$f" ] || return 0
  read -r pid start < "$f" || return 0
  [ -n "$pid" ] && [ "$(proc_start "$pid")" = "$start" ] && echo "$pid"
  return 0
}
descendants() {  # every descendant PID of $1
  local c
  for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done
}
alive_any() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
kill_trees() {  # stop each process $@ with its process group and descendants: SIGTERM to
                # the leaders first (a service shuts its own children down: the scheduler
                # ends its LocalExecutor's workers, which outlive a SIGTERM of their own),
                # after 10 s SIGTERM to whatever of the groups and trees is left, after 10 s
                # more SIGKILL (naming what would not stop)
  local pid tree="" i
  for pid in "$@"; do tree+=" $pid $(descendants "$pid" | tr '\n' ' ')"; done
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    # shellcheck disable=SC2086
    alive_any $tree || return 0
    alive_any "$@" || break
    sleep 0.1
  done
  for pid in "$@"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  # shellcheck disable=SC2086
  kill -TERM $tree 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    # shellcheck disable=SC2086
    alive_any $tree || return 0
    sleep 0.1
  done
  for pid in $tree; do
    kill -0 "$pid" 2>/dev/null && say "still running 20 s after SIGTERM, killed: $pid $(ps -o args= -p "$pid" | cut -c1-80)"
  done
  for pid in "$@"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  # shellcheck disable=SC2086
  kill -KILL $tree 2>/dev/null || true
}

# Postgres refuses to run as root: as root it runs as `nobody` on a data folder that user
# owns (under the state folder when `nobody` can reach it, else a private folder in /tmp).
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi; }
pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && { echo "$d"; return; }; done
  command -v initdb >/dev/null 2>&1 && dirname "$(command -v initdb)"
}
pg_data() {
  if [ -f "$STATE/pgdata.path" ]; then cat "$STATE/pgdata.path"; return; fi
  local d=$STATE/pg
  if [ "$(id -u)" = 0 ] && ! runuser -u nobody -- test -x "$STATE"; then
    d=$(mktemp -d /tmp/flashml-pg.XXXXXX)/data
  fi
  echo "$d" > "$STATE/pgdata.path"
  echo "$d"
}

start() {  # start service $1 as `setsid` leader: its log, its PID file; then the command
  local name=$1; shift
  : > "$LOGS/$name.log"
  setsid "$@" >> "$LOGS/$name.log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid $(proc_start "$pid")" > "$PIDS/$name.pid"
}

# --- ports -----------------------------------------------------------------------------------
port_free() { ! "$PY" - "$1" <<'EOF'
import socket, sys
s = socket.socket()
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
EOF
}
free_ports() {  # $1 distinct free ports on 127.0.0.1
  "$PY" - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}
ports_of() {  # every port service $1 listens on (from the ports file)
  [ -f "$STATE/ports" ] || return 0
  awk -v s="$1" '$1 == s { for (i = 2; i <= NF; i++) print $i }' "$STATE/ports"
}

# --- failure: name the service and its log, stop what was started ----------------------------
fail() {  # service, reason
  local log=$LOGS/$1.log
  [ "$1" = postgres ] && log=$LOGS/postgres.log
  printf 'cluster: error: %s did not come up: %s\ncluster: its log: %s\n' "$1" "$2" "$log" >&2
  if [ -s "$log" ]; then
    printf 'cluster: last lines of %s:\n' "$log" >&2
    tail -n 15 "$log" | sed 's/^/  | /' >&2
  fi
  if [ -n "${ONLY:-}" ]; then
    say "stopping $ONLY"
    stop_one "$ONLY" >&2 || true
  else
    say "stopping what was started"
    do_down >&2 || true
  fi
  exit 1
}
wait_for() {  # service, check command...: until the check passes; fail when the process dies
  local name=$1; shift
  local deadline=$((SECONDS + TIMEOUT)) pid
  while :; do
    if "$@" >/dev/null 2>&1; then say "$name: healthy (${t0:+$((SECONDS - t0)) s after start})"; return 0; fi
    pid=$(recorded_pid "$name")
    [ -n "$pid" ] || fail "$name" "the process exited"
    [ "$SECONDS" -lt "$deadline" ] || fail "$name" "no answer from its health check within ${TIMEOUT} s"
    sleep 0.25
  done
}
http_ok() { curl -fsS --max-time 5 "$1" >/dev/null; }
spark_workers_alive() {  # the master's JSON lists $2 ALIVE workers
  local n
  n=$(curl -fsS --max-time 5 "$1" | grep -o '"aliveworkers" *: *[0-9]*' | grep -o '[0-9]*$')
  [ "${n:-0}" -ge "$2" ]
}
airflow_component_healthy() {  # /api/v2/monitor/health says component $2 is healthy (and,
                               # given $3, epoch seconds: with a heartbeat after that time)
  curl -fsS --max-time 5 "$1" | "$PY" -c '
import datetime, json, sys
c = json.load(sys.stdin).get(sys.argv[1]) or {}
beat = c.get("latest_" + sys.argv[1] + "_heartbeat")
since = float(sys.argv[2]) if len(sys.argv) > 2 else None
fresh = since is None or (beat is not None and
                          datetime.datetime.fromisoformat(beat).timestamp() > since)
sys.exit(0 if c.get("status") == "healthy" and fresh else 1)' "${@:2}"
}

need_port() {  # service, port: refused when another process listens there
  port_free "$2" || { : > "$LOGS/$1.log"; fail "$1" "port $2 on 127.0.0.1 is taken by another process"; }
}

# --- one service ----------------------------------------------------------------------------
load_env() {  # the client's variables, and what the services' own processes need
  set -a
  # shellcheck disable=SC1090
  . "$ENV_FILE"
  set +a
  export PATH="$VENV/bin:$PATH" SPARK_LOG_DIR=$LOGS \
    AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=true
}
# The Spark master and workers (not the executors): JIT compiler C1 only and the serial GC,
# for them and for the launcher JVM spark-class runs first; a daemon that mostly waits on
# sockets starts with half the CPU time (what start-up costs on 2 cores).
SPARK_JVM=("SPARK_DAEMON_JAVA_OPTS=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
           "SPARK_LAUNCHER_OPTS=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
launch() {  # start service $1 (not postgres) as `up` does; load_env first
  local port ui
  case $1 in
    mlflow)  # without the GenAI job runner (seven huey processes flashml has no use for)
      start mlflow env MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false "$VENV/bin/mlflow" server \
        --host 127.0.0.1 --port "$(ports_of mlflow)" --workers 1 \
        --backend-store-uri "${FLASHML_OPTUNA_STORAGE%/optuna}/mlflow" \
        --artifacts-destination "$STATE/mlartifacts" --serve-artifacts ;;
    spark-master)
      read -r port ui <<< "$(ports_of spark-master | tr '\n' ' ')"
      start spark-master env "${SPARK_JVM[@]}" "$SPARK_HOME/bin/spark-class" \
        org.apache.spark.deploy.master.Master \
        --host 127.0.0.1 --port "$port" --webui-port "$ui" ;;
    spark-worker-*)
      mkdir -p "$STATE/spark/worker-${1#spark-worker-}"
      start "$1" env "${SPARK_JVM[@]}" "$SPARK_HOME/bin/spark-class" \
        org.apache.spark.deploy.worker.Worker \
        --host 127.0.0.1 --cores 1 --memory "$WORKER_MEMORY" --webui-port 0 \
        --work-dir "$STATE/spark/worker-${1#spark-worker-}" "$FLASHML_SPARK_MASTER" ;;
    airflow-apiserver)
      start airflow-apiserver "$VENV/bin/airflow" api-server --host 127.0.0.1 \
        --port "$(ports_of airflow-apiserver)" --workers 1 ;;
    airflow-scheduler)  # task logs are files the api-server reads on this machine: no
                        # log server (it would listen on every interface, port 8793)
      start airflow-scheduler "$VENV/bin/airflow" scheduler --skip-serve-logs ;;
    airflow-dag-processor) start airflow-dag-processor "$VENV/bin/airflow" dag-processor ;;
    *) die "no such service: $1 (one of: ${SERVICES[*]})" ;;
  esac
}
await() {  # wait for service $1's health check (load_env first); $2: epoch seconds the
           # service was started at, for the Airflow components' heartbeats
  local health=$FLASHML_AIRFLOW_URL/api/v2/monitor/health n s
  case $1 in
    mlflow) wait_for mlflow http_ok "$MLFLOW_TRACKING_URI/health" ;;
    spark-master) wait_for spark-master http_ok "$FLASHML_SPARK_UI_URL/json/" ;;
    spark-worker-*)  # as many alive as up to this one are running
      n=0
      for s in "${SERVICES[@]}"; do
        case $s in spark-worker-*) [ -n "$(recorded_pid "$s")" ] && n=$((n + 1)) ;; esac
        [ "$s" = "$1" ] && break
      done
      wait_for "$1" spark_workers_alive "$FLASHML_SPARK_UI_URL/json/" "$n" ;;
    airflow-apiserver) wait_for airflow-apiserver http_ok "$health" ;;
    airflow-scheduler) wait_for airflow-scheduler airflow_component_healthy "$health" scheduler ${2:+"$2"} ;;
    airflow-dag-processor)
      wait_for airflow-dag-processor airflow_component_healthy "$health" dag_processor ${2:+"$2"} ;;
  esac
}
stop_one() {  # stop service $1 (its process tree); $2 = --kill: SIGKILL at once
  local pid p tree
  pid=$(recorded_pid "$1")
  if [ -z "$pid" ]; then rm -f "$PIDS/$1.pid"; return 0; fi
  if [ "${2:-}" = --kill ]; then
    say "killing $1 (pid $pid) and its processes"
    tree="$pid $(descendants "$pid" | tr '\n' ' ')"
    kill -KILL -- "-$pid" 2>/dev/null || true
    # shellcheck disable=SC2086
    kill -KILL $tree 2>/dev/null || true
    # shellcheck disable=SC2086
    while alive_any $tree; do sleep 0.1; done
  elif [ "$1" = postgres ]; then
    say "stopping postgres (pid $pid)"
    as_pg "$(pg_bin)/pg_ctl" -D "$(pg_data)" -m fast -w -t 30 -s stop >/dev/null 2>&1 || true
    kill -0 "$pid" 2>/dev/null && kill_trees "$pid"
  else
    say "stopping $1 (pid $pid)"
    kill_trees "$pid"
  fi
  rm -f "$PIDS/$1.pid"
  for p in $(ports_of "$1"); do port_free "$p" || die "$1: port $p still open after stop"; done
}

do_stop() {  # SERVICE [--kill]
  local name=${1:-}
  [ -n "$name" ] || die "stop: which service? (one of: ${SERVICES[*]})"
  [[ " ${SERVICES[*]} " == *" $name "* ]] || die "no such service: $name (one of: ${SERVICES[*]})"
  [ -z "${2:-}" ] || [ "$2" = --kill ] || die "stop: unknown option $2 (only --kill)"
  [ -n "$(recorded_pid "$name")" ] || die "$name is not running in $STATE"
  stop_one "$name" "${2:-}"
}

do_start() {  # SERVICE: one service of a cluster that is up, started again
  local name=${1:-} t0=$SECONDS since
  [ -n "$name" ] || die "start: which service? (one of: ${SERVICES[*]})"
  [[ " ${SERVICES[*]} " == *" $name "* ]] || die "no such service: $name (one of: ${SERVICES[*]})"
  [ -f "$ENV_FILE" ] || die "no cluster in $STATE (scripts/cluster.sh up first)"
  [ -z "$(recorded_pid "$name")" ] || die "$name is already running in $STATE"
  [ "$name" != postgres ] || die "postgres: restart the whole cluster (down, up)"
  local p
  for p in $(ports_of "$name"); do need_port "$name" "$p"; done
  ONLY=$name
  load_env
  since=$("$PY" -c 'import time; print(time.time())')
  say "$name: starting"
  launch "$name"
  await "$name" "$since"
  say "$name: up in $((SECONDS - t0)) s"
}

# --- up --------------------------------------------------------------------------------------
secret() { "$PY" -c 'import secrets; print(secrets.token_urlsafe(24))'; }

do_up() {
  [ -x "$PY" ] || die "no Python venv at $VENV: run \`make setup\` first"
  local s running=""
  for s in "${SERVICES[@]}"; do [ -n "$(recorded_pid "$s")" ] && running+=" $s"; done
  [ -z "$running" ] || die "already running in $STATE:$running (scripts/cluster.sh down first)"
  command -v java >/dev/null 2>&1 || die "Java not found: Spark needs it (Debian: apt-get install openjdk-17-jre-headless)"
  local PGBIN; PGBIN=$(pg_bin) || true
  [ -n "$PGBIN" ] && [ -x "$PGBIN/postgres" ] || die "PostgreSQL not found: no initdb/postgres (Debian: apt-get install postgresql)"
  command -v curl >/dev/null 2>&1 || die "curl not found (Debian: apt-get install curl)"
  mkdir -p "$STATE" "$PIDS" "$LOGS" "$STATE/mlartifacts" "$STATE/home" "$STATE/runs" \
    "$STATE/exported" "$STATE/airflow" "$STATE/spark"
  rm -f "$PIDS"/*.pid
  local t0=$SECONDS
  trap 'say "interrupted: stopping what was started"; do_down >&2 || true; exit 130' INT TERM

  # secrets: generated once, kept with the data they protect
  if [ ! -f "$STATE/secrets" ]; then
    ( umask 077; printf 'DB_PASSWORD=%s\nAIRFLOW_PASSWORD=%s\nJWT_SECRET=%s\n' \
        "$(secret)" "$(secret)" "$(secret)" > "$STATE/secrets" )
  fi
  local DB_PASSWORD AIRFLOW_PASSWORD JWT_SECRET
  # shellcheck disable=SC1091
  . "$STATE/secrets"

  # ports: the ones asked for (refused when taken), else free ones
  local free p
  read -r -a free <<< "$(free_ports 5)"
  local PG_PORT=${FLASHML_CLUSTER_PG_PORT:-${free[0]}}
  local MLFLOW_PORT=${FLASHML_CLUSTER_MLFLOW_PORT:-${free[1]}}
  local SPARK_PORT=${FLASHML_CLUSTER_SPARK_PORT:-${free[2]}}
  local SPARK_UI_PORT=${FLASHML_CLUSTER_SPARK_UI_PORT:-${free[3]}}
  local AIRFLOW_PORT=${FLASHML_CLUSTER_AIRFLOW_PORT:-${free[4]}}
  {
    echo "postgres $PG_PORT"; echo "mlflow $MLFLOW_PORT"
    echo "spark-master $SPARK_PORT $SPARK_UI_PORT"; echo "airflow-apiserver $AIRFLOW_PORT"
  } > "$STATE/ports"

  # PostgreSQL: a private cluster on 127.0.0.1 only (no Unix socket), password auth
  need_port postgres "$PG_PORT"
  local PGDATA; PGDATA=$(pg_data)
  : > "$LOGS/postgres.log"
  if [ ! -f "$PGDATA/PG_VERSION" ]; then
    rm -f "$STATE/airflow/migrated"  # a new database: Airflow's schema is not there
    say "postgres: initdb $PGDATA"
    mkdir -p "$PGDATA"
    local pw; pw=$(mktemp)
    printf '%s\n' "$DB_PASSWORD" > "$pw"
    if [ "$(id -u)" = 0 ]; then chown nobody "$PGDATA" "$pw" "$(dirname "$PGDATA")"; chmod 700 "$PGDATA"; fi
    as_pg "$PGBIN/initdb" -D "$PGDATA" -U flashml --pwfile="$pw" -A scram-sha-256 \
      -E UTF8 --locale=C.UTF-8 >> "$LOGS/postgres.log" 2>&1 \
      || { rm -f "$pw"; fail postgres "initdb failed"; }
    rm -f "$pw"
  fi
  say "postgres: starting on 127.0.0.1:$PG_PORT"
  # no -l: the server writes to the log this shell opened (`nobody` may not reach $LOGS)
  as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -w -t 60 -s \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=''" start \
    >> "$LOGS/postgres.log" 2>&1 || fail postgres "pg_ctl start failed"
  local pgpid; pgpid=$(head -n 1 "$PGDATA/postmaster.pid")
  echo "$pgpid $(proc_start "$pgpid")" > "$PIDS/postgres.pid"
  wait_for postgres "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"
  local db have
  have=$(PGPASSWORD=$DB_PASSWORD "$PGBIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U flashml \
    -d postgres -tAc "SELECT datname FROM pg_database") || fail postgres "psql failed"
  for db in mlflow optuna airflow; do
    grep -qx "$db" <<< "$have" \
      || PGPASSWORD=$DB_PASSWORD "$PGBIN/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U flashml \
           -d postgres -c "CREATE DATABASE $db" >> "$LOGS/postgres.log" 2>&1 \
      || fail postgres "CREATE DATABASE $db failed"
  done
  local PG=flashml:$DB_PASSWORD@127.0.0.1:$PG_PORT

  # the client's variables: the compose file's (x-flashml-env and the Airflow services'), with
  # this machine's addresses and folders; then what the compose images supply themselves
  # where PySpark is, and Airflow's version, without importing either (seconds of CPU)
  local SPARK_HOME AIRFLOW_VERSION
  { read -r SPARK_HOME; read -r AIRFLOW_VERSION; } < <("$PY" -c '
import importlib.metadata, importlib.util
print(importlib.util.find_spec("pyspark").submodule_search_locations[0])
print(importlib.metadata.version("apache-airflow-core"))')
  ( umask 077; cat > "$ENV_FILE" <<EOF
# flashml's scaled-out services on this machine (scripts/cluster.sh up); source with
#   set -a; . $ENV_FILE; set +a
# -- the variables docker-compose.yml sets (tests/services/test_cluster.py checks they are the same)
MLFLOW_TRACKING_URI=http://127.0.0.1:$MLFLOW_PORT
FLASHML_OPTUNA_STORAGE=postgresql+psycopg2://$PG/optuna
FLASHML_SPARK_MASTER=spark://127.0.0.1:$SPARK_PORT
FLASHML_HOME=$STATE/home
FLASHML_RETRAIN_DIR=$STATE/runs
FLASHML_EXPORT_DIR=$STATE/exported
FLASHML_RETRAIN_SCHEDULE='${FLASHML_RETRAIN_SCHEDULE:-@daily}'
AIRFLOW__CORE__EXECUTOR=LocalExecutor
AIRFLOW__CORE__LOAD_EXAMPLES=false
AIRFLOW__CORE__DAGS_FOLDER=$REPO/dags
AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgresql+psycopg2://$PG/airflow
AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://127.0.0.1:$AIRFLOW_PORT/execution/
AIRFLOW__API_AUTH__JWT_SECRET=$JWT_SECRET
AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=admin:admin
# -- native only: what the compose images set themselves (AIRFLOW_HOME, the generated
# -- password's file, Spark's home; the Spark driver on loopback) and where a client finds the services
AIRFLOW_HOME=$STATE/airflow
AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=$STATE/airflow/passwords.json
SPARK_HOME=$SPARK_HOME
SPARK_LOCAL_IP=127.0.0.1
FLASHML_AIRFLOW_URL=http://127.0.0.1:$AIRFLOW_PORT
FLASHML_AIRFLOW_USER=admin
FLASHML_AIRFLOW_PASSWORD=$AIRFLOW_PASSWORD
FLASHML_SPARK_UI_URL=http://127.0.0.1:$SPARK_UI_PORT
EOF
  )
  ( umask 077; printf '{"admin": "%s"}\n' "$AIRFLOW_PASSWORD" > "$STATE/airflow/passwords.json" )
  load_env

  # MLflow, Spark and Airflow's migration start together
  need_port mlflow "$MLFLOW_PORT"
  say "mlflow: starting on 127.0.0.1:$MLFLOW_PORT (store: Postgres, artifacts: $STATE/mlartifacts)"
  launch mlflow
  need_port spark-master "$SPARK_PORT"
  need_port spark-master "$SPARK_UI_PORT"
  say "spark: master on 127.0.0.1:$SPARK_PORT (UI :$SPARK_UI_PORT), $WORKERS workers"
  launch spark-master
  for ((i = 1; i <= WORKERS; i++)); do launch "spark-worker-$i"; done
  need_port airflow-apiserver "$AIRFLOW_PORT"
  # `airflow db migrate` only when this Airflow has not migrated this database yet (a new
  # database, or another Airflow version since): the mark is written once it succeeded
  local mark="airflow $AIRFLOW_VERSION, database in $PGDATA"
  if [ "$(cat "$STATE/airflow/migrated" 2>/dev/null)" = "$mark" ]; then
    say "airflow: database already migrated by Airflow $AIRFLOW_VERSION"
  else
    say "airflow: db migrate"
    "$VENV/bin/airflow" db migrate > "$LOGS/airflow-migrate.log" 2>&1 \
      || { cp "$LOGS/airflow-migrate.log" "$LOGS/airflow-apiserver.log"; \
           fail airflow-apiserver "\`airflow db migrate\` failed (log: $LOGS/airflow-migrate.log)"; }
    echo "$mark" > "$STATE/airflow/migrated"
    say "airflow: database migrated ($((SECONDS - t0)) s after start)"
  fi
  say "airflow: api-server on 127.0.0.1:$AIRFLOW_PORT, scheduler, dag-processor"
  launch airflow-apiserver
  launch airflow-scheduler
  launch airflow-dag-processor

  for s in "${SERVICES[@]}"; do [ "$s" = postgres ] || await "$s"; done
  trap - INT TERM
  echo "$((SECONDS - t0))" > "$STATE/startup_s"
  say "up in $((SECONDS - t0)) s; client variables: $ENV_FILE"
  say "  MLflow http://127.0.0.1:$MLFLOW_PORT  Airflow http://127.0.0.1:$AIRFLOW_PORT (admin, password in $ENV_FILE)  Spark UI http://127.0.0.1:$SPARK_UI_PORT"
}

# --- down ------------------------------------------------------------------------------------
do_down() {
  local i pid name stopped=0 ours=() pids=()
  # Airflow, Spark and MLflow together (their clients first), then Postgres
  for ((i = ${#SERVICES[@]} - 1; i >= 0; i--)); do
    name=${SERVICES[$i]}
    [ "$name" = postgres ] && continue
    pid=$(recorded_pid "$name")
    if [ -n "$pid" ]; then ours+=("$name"); pids+=("$pid"); say "stopping $name (pid $pid)"; fi
  done
  [ ${#pids[@]} -eq 0 ] || kill_trees "${pids[@]}"
  stopped=${#pids[@]}
  pid=$(recorded_pid postgres)
  if [ -n "$pid" ]; then
    ours+=(postgres)
    say "stopping postgres (pid $pid)"
    as_pg "$(pg_bin)/pg_ctl" -D "$(pg_data)" -m fast -w -t 30 -s stop >/dev/null 2>&1 || true
    kill -0 "$pid" 2>/dev/null && kill_trees "$pid"
    stopped=$((stopped + 1))
  fi
  for name in "${SERVICES[@]}"; do rm -f "$PIDS/$name.pid"; done
  # nothing of ours may still listen
  local left="" p s
  for s in "${ours[@]}"; do
    for p in $(ports_of "$s"); do port_free "$p" || left+=" $s:$p"; done
  done
  [ "$stopped" -gt 0 ] || say "nothing was running in $STATE"
  [ -z "$left" ] || die "ports still open after down:$left"
}

# --- status ----------------------------------------------------------------------------------
do_status() {
  local s pid bad=0 ports
  for s in "${SERVICES[@]}"; do
    pid=$(recorded_pid "$s")
    ports=$(ports_of "$s" | tr '\n' ' ')
    if [ -n "$pid" ]; then
      printf '%-22s up    pid %-8s %s\n' "$s" "$pid" "${ports:+127.0.0.1:${ports% }}"
    else
      printf '%-22s down\n' "$s"; bad=1
    fi
  done
  if [ "$bad" = 0 ] && [ -f "$ENV_FILE" ]; then
    set -a
    # shellcheck disable=SC1090
    . "$ENV_FILE"
    set +a
    local h=$AIRFLOW__CORE__EXECUTION_API_SERVER_URL
    http_ok "$MLFLOW_TRACKING_URI/health" && echo "mlflow health: ok" || { echo "mlflow health: FAILED"; bad=1; }
    spark_workers_alive "$FLASHML_SPARK_UI_URL/json/" "$WORKERS" \
      && echo "spark: $WORKERS workers alive" || { echo "spark: workers missing"; bad=1; }
    curl -fsS --max-time 5 "${h%/execution/}/api/v2/monitor/health" && echo || { echo "airflow health: FAILED"; bad=1; }
    echo "client variables: $ENV_FILE"
  fi
  return $bad
}

# --- test ------------------------------------------------------------------------------------
do_test() {
  local started=0
  if ! do_status >/dev/null 2>&1; then do_up; started=1; fi
  local rc=0
  ( set -a; . "$ENV_FILE"; set +a; "$PY" "$REPO/scripts/cluster_check.py" ) || rc=$?
  if [ "$started" = 1 ]; then do_down; fi
  [ "$rc" = 0 ] && say "test passed" || say "test FAILED"
  return $rc
}

case ${1:-} in
  up) do_up ;;
  down) do_down ;;
  status) do_status ;;
  test) do_test ;;
  stop) do_stop "${@:2}" ;;
  start) do_start "${@:2}" ;;
  *) echo "usage: scripts/cluster.sh up|down|status|test|stop SERVICE [--kill]|start SERVICE   (state: \$FLASHML_CLUSTER_DIR, default .flashml/cluster)" >&2; exit 2 ;;
esac
