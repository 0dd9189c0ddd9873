#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL cluster for tests (Debian's postgresql package).
#
#   eval "$(bash e2e/postgres.sh start /tmp/airlock-pg)"   # prints: export AIRLOCK_TEST_POSTGRES=postgres://…
#   bash e2e/postgres.sh stop /tmp/airlock-pg
#
# Listens on 127.0.0.1 only (port PGPORT, default 55432), trust auth for user airlock,
# data in DIR (removed by stop). Runs the server as the "postgres" user when started as root.
set -euo pipefail

cmd=${1:?usage: postgres.sh start|stop DIR}
dir=${2:?usage: postgres.sh start|stop DIR}
port=${PGPORT:-55432}

bindir=""
for d in /usr/lib/postgresql/*/bin; do
	[ -x "$d/initdb" ] && bindir=$d
done
if [ -z "$bindir" ]; then
	echo "postgres.sh: no PostgreSQL server found; apt-get install -y postgresql" >&2
	exit 1
fi

as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

case $cmd in
start)
	mkdir -p "$dir"
	if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
	if [ ! -f "$dir/data/PG_VERSION" ]; then
		as_pg "$bindir/initdb" -D "$dir/data" -U airlock --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 ||
			{ cat "$dir/initdb.log" >&2; exit 1; }
	fi
	as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
		-o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200 -c fsync=off" start >&2 ||
		{ cat "$dir/server.log" >&2; exit 1; }
	echo "export AIRLOCK_TEST_POSTGRES=postgres://airlock@127.0.0.1:$port/postgres?sslmode=disable"
	;;
stop)
	if [ -f "$dir/data/postmaster.pid" ]; then
		as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
	fi
	rm -rf "$dir"
	;;
*)
	echo "usage: postgres.sh start|stop DIR" >&2
	exit 2
	;;
esac
