#!/usr/bin/env bash
# Sourced by relay.sh and paired.sh: builds floodgate in release mode and starts it on
# 127.0.0.1:26259 in front of the sink on 127.0.0.1:26250, with the default policy and
# client_identity = "none" (smtp-sink does not authorise XCLIENT). Sets FG (its PID) and TMP
# (its directory); the caller stops it (floodgate_down).
# FLOODGATE_WORKERS=N sets [server] workers (default: one event loop per core);
# FLOODGATE_PLACEMENT=even|pack sets [server] placement (default even).
# FLOODGATE_LOG_LEVEL sets [log] level (default warn; "info" adds the per-session and
# per-message log lines, written to a file, as a postmaster would run it).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HARNESS=${HARNESS:-$ROOT/../shared/bench}
[[ -x $HARNESS/bench.sh ]] || { echo "no harness at $HARNESS" >&2; exit 1; }
# FLOODGATE_BIN=path runs that binary instead of building target/release/floodgate.
if [[ -z ${FLOODGATE_BIN:-} ]]; then
    cargo build --release --manifest-path "$ROOT/Cargo.toml" --bin floodgate
fi
FLOODGATE_BIN=${FLOODGATE_BIN:-$ROOT/target/release/floodgate}
TMP=$(mktemp -d /tmp/floodgate-bench.XXXXXX)
cat >"$TMP/floodgate.toml" <<TOML
[server]
max_connections_per_ip = 10000
workers = ${FLOODGATE_WORKERS:-0}
placement = "${FLOODGATE_PLACEMENT:-even}"
[[listener]]
name = "bench"
address = "127.0.0.1:26259"
tls = "none"
[upstream]
address = "127.0.0.1:26250"
client_identity = "none"
[log]
level = "${FLOODGATE_LOG_LEVEL:-warn}"
TOML
# In a session of its own, as the harness starts nginx and smtp-sink (setsid) and as a daemon
# runs: with the kernel's scheduler autogroups, a process left in the caller's session shares
# one CPU share with smtp-source, which the harness's own servers do not.
setsid "$FLOODGATE_BIN" run --config "$TMP/floodgate.toml" >"$TMP/stdout" 2>"$TMP/stderr" </dev/null &
FG=$!
floodgate_down() { kill "$FG" 2>/dev/null; wait "$FG" 2>/dev/null; rm -rf "$TMP"; }
for _ in $(seq 50); do grep -q '^listening' "$TMP/stdout" 2>/dev/null && break; sleep 0.1; done
grep -q '^listening' "$TMP/stdout" || { cat "$TMP/stderr" >&2; floodgate_down; exit 1; }
