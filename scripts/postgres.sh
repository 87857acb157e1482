#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests of the Postgres backend.
#
#   scripts/postgres.sh start   install PostgreSQL from Debian if missing, create a cluster in a
#                               temporary directory, start it on 127.0.0.1 and a free port
#                               (fsync=on, synchronous_commit=on, as the contract's durability
#                               needs), and a PgBouncer in transaction pooling mode in front of
#                               it on another free port (installed from Debian if missing); print
#                               the export lines of LAPILLI_TEST_POSTGRES_URL,
#                               LAPILLI_TEST_PGBOUNCER_URL and LAPILLI_TEST_POSTGRES_CA (the
#                               server also accepts TLS, with a certificate for 127.0.0.1 signed
#                               by a CA made for this cluster; that file is the CA's), and
#                               for the client-certificate test LAPILLI_TEST_POSTGRES_CERT_URL
#                               (user lapilli_cert, its own database, let in over TLS only with
#                               a certificate of that CA), ..._CLIENT_CERT and ..._CLIENT_KEY
#   scripts/postgres.sh env     print those export lines again for the running cluster
#   scripts/postgres.sh stop    stop the pooler and the cluster and remove their directory
#   scripts/postgres.sh kill    SIGKILL every process of the server at once (the server-kill
#                               test's crash) and wait until they are gone; the pooler stays
#   scripts/postgres.sh restart start the server again on the same directory and port
#
# Usage from a script under `set -e`: trap 'scripts/postgres.sh stop' EXIT;
# env=$(scripts/postgres.sh start); eval "$env" (not `eval "$(...)"`, whose status is eval's).
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

exports() {
  echo "export LAPILLI_TEST_POSTGRES_URL=$(url_of "$port")"
  echo "export LAPILLI_TEST_PGBOUNCER_URL=$(url_of "$bouncer_port")"
  echo "export LAPILLI_TEST_POSTGRES_CA=$root/tls/ca.pem"
  echo "export LAPILLI_TEST_POSTGRES_CLIENT_CERT=$root/tls/client.pem"
  echo "export LAPILLI_TEST_POSTGRES_CLIENT_KEY=$root/tls/client.key"
  echo "export LAPILLI_TEST_POSTGRES_CERT_URL=postgresql://$CERT_USER@127.0.0.1:$port/$CERT_USER"
}

# A certificate authority made for this cluster and the server's certificate for 127.0.0.1 and
# localhost, so the TLS path (sslmode=verify-full&sslrootcert=...) is tested against a real
# handshake. v3 extensions throughout: rustls's verifier refuses v1 and CA-less chains.
make_tls() {
  local dir=$1
  if ! command -v openssl >/dev/null 2>&1; then
    echo "openssl is not installed: installing it from Debian's packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq openssl >&2
  fi
  mkdir -p "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 7 \
    -subj "/CN=Lapilli test CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  issue_cert "$dir" server "/CN=127.0.0.1" \
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n'
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir/server.key" "$dir/server.pem"; fi
  # A client certificate for the user CERT_USER, whom pg_hba.conf lets in over TLS only with a
  # certificate of this CA naming it (the test of sslcert/sslkey).
  issue_cert "$dir" client "/CN=$CERT_USER" \
    'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n'
}

# A P-256 key and a certificate for SUBJECT signed by the cluster's CA in DIR, with the v3
# EXTENSIONS given (printf escapes): DIR/NAME.key (mode 600) and DIR/NAME.pem.
issue_cert() {
  local dir=$1 name=$2 subject=$3 extensions=$4
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$subject" \
    -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
  printf '%b' "$extensions" > "$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 7 -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
  chmod 600 "$dir/$name.key"
}

# The user whose connections need a client certificate (see make_tls and start).
CERT_USER=lapilli_cert

pgbouncer_bin() {
  if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
    echo "PgBouncer is not installed: installing it from Debian's packages" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq pgbouncer >&2
  fi
  command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer
}

# PgBouncer in transaction pooling mode (a server connection is lent for one transaction only,
# so a LISTEN does not outlive its statement) in front of the cluster. The cluster trusts every
# local connection (initdb --auth=trust), so the pooler trusts its clients too; trust still
# needs the user in auth_file.
start_pgbouncer() {
  local dir=$root/pgbouncer
  as_postgres mkdir "$dir"
  as_postgres tee "$dir/userlist.txt" >/dev/null <<<'"lapilli" ""'
  as_postgres tee "$dir/pgbouncer.ini" >/dev/null <<EOF_INI
[databases]
lapilli = host=127.0.0.1 port=$port dbname=lapilli user=lapilli

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 400
default_pool_size = 40
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF_INI
  as_postgres "$(pgbouncer_bin)" -d "$dir/pgbouncer.ini" >&2
  # -d returns once it has forked; wait until the port answers.
  for _ in $(seq 1 100); do
    if python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$bouncer_port" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "PgBouncer did not start; its log:" >&2
  cat "$dir/pgbouncer.log" >&2 || true
  exit 1
}

pg_ctl_run() {
  # shellcheck disable=SC1090
  . "$state"
  as_postgres "$bin/pg_ctl" -D "$data" -l "$data/../server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$data/.. -c fsync=on -c synchronous_commit=on -c max_connections=200 -c ssl=on -c ssl_cert_file=$root/tls/server.pem -c ssl_key_file=$root/tls/server.key -c ssl_ca_file=$root/tls/ca.pem" \
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
    bouncer_port=$(free_port)
    as_postgres "$bin/initdb" -D "$data" -U lapilli --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    # Before initdb's trust lines (the first line that matches decides): CERT_USER comes in
    # over TLS with a certificate of the cluster's CA whose CN names it, and not otherwise over TCP
    # (the Unix socket stays trust for everyone, as initdb wrote it; the tests use TCP).
    { echo "hostssl all $CERT_USER 127.0.0.1/32 cert"; echo "host all $CERT_USER 127.0.0.1/32 reject"; cat "$data/pg_hba.conf"; } > "$root/pg_hba.conf"
    as_postgres cp "$root/pg_hba.conf" "$data/pg_hba.conf"
    make_tls "$root/tls"
    printf 'bin=%q\ndata=%q\nport=%q\nbouncer_port=%q\nroot=%q\n' "$bin" "$data" "$port" "$bouncer_port" "$root" > "$state"
    pg_ctl_run start
    as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U lapilli lapilli
    # CERT_USER's own database (it owns its schema, so it can create Lapilli's tables there).
    as_postgres "$bin/psql" -q -h 127.0.0.1 -p "$port" -U lapilli -d lapilli -c "CREATE ROLE $CERT_USER LOGIN" >/dev/null
    as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U lapilli -O "$CERT_USER" "$CERT_USER"
    start_pgbouncer
    exports
    ;;
  env)
    # shellcheck disable=SC1090
    . "$state"
    exports
    ;;
  kill)
    # shellcheck disable=SC1090
    . "$state"
    # The whole server at once, as a machine that loses power: the postmaster and every
    # process it started (backends mid-statement, the WAL writer, the checkpointer). Killing
    # only the postmaster left its backends running long enough to finish a COMMIT.
    postmaster=$(head -1 "$data/postmaster.pid" 2>/dev/null || true)
    case "$postmaster" in
      '' | *[!0-9]*) echo "postgres.sh kill: no server pid in $data/postmaster.pid" >&2; exit 1 ;;
    esac
    # This cluster's postmaster, not a process that took a stale pid: it runs in the data
    # directory.
    if [ "$(readlink "/proc/$postmaster/cwd" 2>/dev/null)" != "$(cd "$data" && pwd -P)" ]; then
      echo "postgres.sh kill: pid $postmaster of $data/postmaster.pid is not this cluster's server" >&2
      exit 1
    fi
    # Stopped first, so that it forks nobody between the listing below and the kill; let go
    # again if this script is interrupted before the kill.
    trap 'kill -CONT "$postmaster" 2>/dev/null || true' EXIT
    kill -STOP "$postmaster"
    # Its children from /proc (not `ps`, which a minimal machine may not have): the parent is
    # the second field after the name, which ends at the last ") " (a name may hold spaces
    # and parentheses). A process gone before it is read is skipped.
    processes=$postmaster
    for stat in /proc/[0-9]*/stat; do
      { read -r line < "$stat"; } 2>/dev/null || continue
      set -- ${line##*) }
      if [ "${2:-}" = "$postmaster" ]; then processes="$processes ${stat//[!0-9]/}"; fi
    done
    # shellcheck disable=SC2086
    kill -KILL $processes 2>/dev/null || true
    # Gone, not dying: a restart meets no shared memory still held by one of them. (A zombie
    # has let go of its memory; it is gone for this purpose.)
    gone=0
    for _ in $(seq 1 200); do
      alive=0
      for pid in $processes; do
        if [ -d "/proc/$pid" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null; then alive=1; fi
      done
      if [ "$alive" = 0 ]; then gone=1; break; fi
      sleep 0.05
    done
    if [ "$gone" = 0 ]; then echo "postgres.sh kill: processes of the server still alive after 10 s: $processes" >&2; exit 1; fi
    ;;
  restart)
    # shellcheck disable=SC1090
    . "$state"
    # After a `kill` above every process is gone; a postmaster killed some other way leaves
    # its children for a moment, and start refuses while they hold shared memory, so wait for
    # the pid file's owner to be gone too.
    for _ in $(seq 1 100); do
      pid=$(head -1 "$data/postmaster.pid" 2>/dev/null || true)
      if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then break; fi
      # A zombie counts too, until its parent reaps it: the server's own checks of its lock
      # files (the pid file's and the socket's) take it for alive.
      sleep 0.1
    done
    pg_ctl_run start
    ;;
  stop)
    [ -f "$state" ] || exit 0
    # shellcheck disable=SC1090
    . "$state"
    if [ -f "$root/pgbouncer/pgbouncer.pid" ]; then
      kill -TERM "$(cat "$root/pgbouncer/pgbouncer.pid")" 2>/dev/null || true
    fi
    as_postgres "$bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$root" "$state"
    ;;
  *)
    echo "usage: $0 start|env|stop|kill|restart" >&2
    exit 2
    ;;
esac
