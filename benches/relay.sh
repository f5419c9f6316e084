#!/usr/bin/env bash
# Relay throughput: floodgate beside the direct path and nginx's stream byte relay, in one run
# of the shared harness (Postfix smtp-source -> [path] -> smtp-sink, all on 127.0.0.1).
#
#   benches/relay.sh [bench.sh options...]     e.g.  benches/relay.sh -n 3 -m 20000
#
# Needs ../shared/bench (install-tools.sh installs smtp-source/smtp-sink and nginx).
# floodgate listens on 127.0.0.1:26259 (see floodgate-up.sh for its config and settings).
set -euo pipefail
. "$(dirname "$0")/floodgate-up.sh"
trap floodgate_down EXIT
"$HARNESS/bench.sh" -P "direct nstream proxy" -x 127.0.0.1:26259 "$@"
