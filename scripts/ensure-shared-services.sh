#!/usr/bin/env bash
# PostgreSQL and Redis on loopback for the multi-node tests (tests/integration/test_scale.py and friends).
# Starts an installed but stopped service when allowed to (root or password-less sudo); never installs one.
# Exit 0 when both answer, 1 otherwise (the tests then skip with the reason).
set -uo pipefail

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif sudo -n true 2>/dev/null; then sudo -n "$@"; else return 1; fi
}

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = PONG ]; }

if command -v pg_isready >/dev/null && ! pg_up; then
    as_root service postgresql start >/dev/null 2>&1 || true
    for _ in $(seq 1 20); do pg_up && break; sleep 0.5; done
fi
if command -v redis-cli >/dev/null && ! redis_up; then
    as_root service redis-server start >/dev/null 2>&1 || true
    for _ in $(seq 1 20); do redis_up && break; sleep 0.5; done
fi

status=0
if pg_up; then echo "postgresql: up on 127.0.0.1:5432"; else echo "postgresql: not reachable on 127.0.0.1:5432"; status=1; fi
if redis_up; then echo "redis:      up on 127.0.0.1:6379"; else echo "redis:      not reachable on 127.0.0.1:6379"; status=1; fi
exit $status
