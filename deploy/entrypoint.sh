#!/bin/sh
# Put the mounted config in the node's home, then run the daemon in the foreground (PID 1 gets SIGTERM: every live
# session stops with reason `shutdown`, and its lease is released for another node).
#
# /etc/compozy/config.toml (a ConfigMap or a bind mount) is copied to $COMPOZY_HOME/config.toml at every start, so an
# edited config takes effect at the next restart; `@NODE_ID@` in it becomes $COMPOZY_NODE_ID (a StatefulSet's pod
# name), which is how each node's `[cluster] advertise_url` names the node itself.
set -eu
umask 077
if [ -f /etc/compozy/config.toml ]; then
    sed "s/@NODE_ID@/${COMPOZY_NODE_ID:-}/g" /etc/compozy/config.toml > "$COMPOZY_HOME/config.toml"
fi
exec compozy daemon start --foreground "$@"
