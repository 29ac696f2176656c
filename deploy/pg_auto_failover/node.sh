#!/bin/sh
# pgaf-node monitor | pgaf-node postgres MONITOR_HOST: create the node on first start (its
# settings tuned for a short failover, docs/operations.md), then run its keeper.
set -eu
role="$1"
host="$(hostname)"
if [ ! -f "$PGDATA/PG_VERSION" ]; then
    case "$role" in
    monitor)
        pg_autoctl create monitor --hostname "$host" --auth trust --ssl-self-signed
        # Failure detection: a health check a second, a node unhealthy after 4 s without a
        # report, the standby promoted 5 s after the primary was asked to demote.
        cat >>"$PGDATA/postgresql.auto.conf" <<SETTINGS
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 1000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 4000
pgautofailover.primary_demote_timeout = 5000
SETTINGS
        ;;
    postgres)
        pg_autoctl create postgres --hostname "$host" --name "$host" --dbname calmon \
            --monitor "postgres://autoctl_node@$2:5432/pg_auto_failover?sslmode=require" \
            --auth trust --ssl-self-signed --pg-hba-lan
        cat >>"$PGDATA/postgresql.auto.conf" <<SETTINGS
wal_sender_timeout = '5s'
wal_receiver_timeout = '5s'
SETTINGS
        ;;
    *)
        echo "usage: pgaf-node monitor | pgaf-node postgres MONITOR_HOST" >&2
        exit 2
        ;;
    esac
fi
exec pg_autoctl run
