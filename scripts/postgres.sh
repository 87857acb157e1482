#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests of the Postgres backend.
#
#   scripts/postgres.sh start   install PostgreSQL from Debian if missing, create a cluster in a
#                               temporary directory, start it on 127.0.0.1 and a free port
#                               (fsync=on, synchronous_commit=on, as the contract's durability
#                               needs), print the export line of LAPILLI_TEST_POSTGRES_URL
#   scripts/postgres.sh env     print that export line again for the running cluster
#   scripts/postgres.sh stop    stop the cluster and remove its directory
#   scripts/postgres.sh kill    SIGKILL the server (the server-kill test's crash)
#   scripts/postgres.sh restart start it again on the same directory and port
#
# Usage from a script: eval "$(scripts/postgres.sh start)"; trap 'scripts/postgres.sh stop' EXIT
#
# The server runs as a non-root user (PostgreSQL refuses root): `postgres` from the Debian
# package. Where the cluster is lives in LAPILLI_PG_STATE (default /tmp/lapilli-pg.state), so
# that env, stop, kill and restart find it.
set -euo pipefail

state=${LAPILLI_PG_STATE:-/tmp/lapilli-pg.state}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

bin_dir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$dir" ] || [ ! -x "$dir/initdb" ]; then
    echo "PostgreSQL is not installed: installing it from Debian's packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
    dir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  echo "$dir"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

url_of() {
  echo "postgresql://lapilli@127.0.0.1:$1/lapilli"
}

pg_ctl_run() {
  # shellcheck disable=SC1090
  . "$state"
  as_postgres "$bin/pg_ctl" -D "$data" -l "$data/../server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$data/.. -c fsync=on -c synchronous_commit=on -c max_connections=200" \
    "$@" >&2
}

case "${1:-}" in
  start)
    if [ -f "$state" ]; then
      echo "a cluster is already running (state in $state); stop it first" >&2
      exit 1
    fi
    bin=$(bin_dir)
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin postgres
    root=$(mktemp -d /tmp/lapilli-pg.XXXXXX)
    chown postgres "$root"
    data=$root/data
    port=$(free_port)
    as_postgres "$bin/initdb" -D "$data" -U lapilli --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    printf 'bin=%q\ndata=%q\nport=%q\nroot=%q\n' "$bin" "$data" "$port" "$root" > "$state"
    pg_ctl_run start
    as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U lapilli lapilli
    echo "export LAPILLI_TEST_POSTGRES_URL=$(url_of "$port")"
    ;;
  env)
    # shellcheck disable=SC1090
    . "$state"
    echo "export LAPILLI_TEST_POSTGRES_URL=$(url_of "$port")"
    ;;
  kill)
    # shellcheck disable=SC1090
    . "$state"
    kill -KILL "$(head -1 "$data/postmaster.pid")"
    ;;
  restart)
    # shellcheck disable=SC1090
    . "$state"
    # A killed postmaster leaves its children for a moment; start refuses while they hold
    # shared memory, so wait for the pid file's owner to be gone.
    for _ in $(seq 1 100); do
      pid=$(head -1 "$data/postmaster.pid" 2>/dev/null || true)
      if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then break; fi
      sleep 0.1
    done
    pg_ctl_run start
    ;;
  stop)
    [ -f "$state" ] || exit 0
    # shellcheck disable=SC1090
    . "$state"
    as_postgres "$bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$root" "$state"
    ;;
  *)
    echo "usage: $0 start|env|stop|kill|restart" >&2
    exit 2
    ;;
esac
