#!/usr/bin/env bash
# Two floodgate builds against each other, pair by pair, in front of the same smtp-sink:
# for each profile, PAIRS times one run through each build back to back (the order swapped
# every other pair). Prints the median of the pairs' throughput ratios B/A with its range,
# each build's median msgs/s, and each build's median CPU µs per message (the whole process:
# every thread, from /proc/PID/stat utime+stime). For deciding a change to the relay path by
# what the whole relay costs, not by one part of it.
#
#   benches/ab.sh [-n PAIRS] [-m MESSAGES] [-F "PROFILES"] BINARY_A BINARY_B
#       (defaults: 8 pairs, 6000 messages a run, small-reuse and big-reuse)
#
# Parts: ../shared/bench's smtp-sink on 127.0.0.1:26250 and load.sh; build A listens on
# 127.0.0.1:26263, build B on 127.0.0.1:26264, both with floodgate-up.sh's settings
# (FLOODGATE_LOG_LEVEL, default info here; FLOODGATE_WORKERS; FLOODGATE_PLACEMENT). Every run must deliver every
# message (the sink's counter), else the script stops. Every process started is stopped by
# PID on exit.
set -euo pipefail
PAIRS=8 M=6000 PROFILES="small-reuse big-reuse"
while getopts "n:m:F:h" o; do
    case "$o" in
        n) PAIRS=$OPTARG ;;
        m) M=$OPTARG ;;
        F) PROFILES=$OPTARG ;;
        h) sed -n '2,16p' "$0"; exit 0 ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
(($# == 2)) || { echo "usage: benches/ab.sh [-n PAIRS] [-m MESSAGES] [-F PROFILES] BINARY_A BINARY_B" >&2; exit 2; }
A=$1 B=$2
for b in "$A" "$B"; do [[ -x $b ]] || { echo "$b is not an executable" >&2; exit 2; }; done
[[ $PAIRS =~ ^[1-9][0-9]*$ && $M =~ ^[1-9][0-9]*$ ]] || { echo "-n and -m take a count" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HARNESS=${HARNESS:-$ROOT/../shared/bench}
[[ -x $HARNESS/load.sh ]] || { echo "no harness at $HARNESS" >&2; exit 2; }
flags() {
    case "$1" in
        small) echo "-r 1 -l 1024" ;;
        small-reuse) echo "-r 1 -l 1024 -d" ;;
        big) echo "-r 5 -l 20480" ;;
        big-reuse) echo "-r 5 -l 20480 -d" ;;
        *) return 1 ;;
    esac
}
for p in $PROFILES; do flags "$p" >/dev/null || { echo "unknown profile $p" >&2; exit 2; }; done

TMP=$(mktemp -d /tmp/floodgate-ab.XXXXXX)
SINK="" PA="" PB=""
trap 'kill $PA $PB $SINK 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
SINKLOG="$TMP/sink.log"
SINK=$("$HARNESS/sink.sh" -p 26250 -L "$SINKLOG")

# start BINARY PORT: starts one build in a session of its own; prints its PID.
start() {
    local dir="$TMP/$2"
    mkdir -p "$dir"
    cat >"$dir/floodgate.toml" <<TOML
[server]
max_connections_per_ip = 10000
workers = ${FLOODGATE_WORKERS:-0}
placement = "${FLOODGATE_PLACEMENT:-even}"
[[listener]]
name = "bench"
address = "127.0.0.1:$2"
tls = "none"
[upstream]
address = "127.0.0.1:26250"
client_identity = "none"
[log]
level = "${FLOODGATE_LOG_LEVEL:-info}"
TOML
    setsid "$1" run --config "$dir/floodgate.toml" >"$dir/stdout" 2>"$dir/stderr" </dev/null &
    echo $!
}
PA=$(start "$A" 26263)
PB=$(start "$B" 26264)
for d in 26263 26264; do
    for _ in $(seq 50); do grep -q '^listening' "$TMP/$d/stdout" 2>/dev/null && break; sleep 0.1; done
    grep -q '^listening' "$TMP/$d/stdout" || { cat "$TMP/$d/stderr" >&2; exit 1; }
done

TICK=$(getconf CLK_TCK)
# run PID PORT PROFILE: "msgs/s CPU-µs-per-message" of one load.sh run.
run() {
    local line sent delivered c0 c1
    c0=$(awk '{print $14 + $15}' "/proc/$1/stat")
    # shellcheck disable=SC2046
    line=$("$HARNESS/load.sh" -t "127.0.0.1:$2" -s 10 -m "$M" $(flags "$3") -k "$SINKLOG")
    c1=$(awk '{print $14 + $15}' "/proc/$1/stat")
    sent=$(grep -o 'sent=[0-9]*' <<<"$line" | cut -d= -f2)
    delivered=$(grep -o 'delivered=[0-9]*' <<<"$line" | cut -d= -f2)
    if [[ $sent != "$M" || $delivered != "$M" ]]; then
        echo "port $2, $3: sent=$sent delivered=$delivered of $M" >&2
        exit 1
    fi
    awk -v r="$(grep -o 'msgs_per_s=[0-9.]*' <<<"$line" | cut -d= -f2)" -v d="$((c1 - c0))" \
        -v t="$TICK" -v m="$M" 'BEGIN { printf "%s %.1f\n", r, d / t * 1e6 / m }'
}
median() { sort -g | awk '{v[NR]=$1} END{if (NR) print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

printf '# %s, %s cores, load average %s; A=%s B=%s\n' "$(date -u +%FT%TZ)" "$(nproc)" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" "$A" "$B"
for profile in $PROFILES; do
    ratios=() ra=() rb=() ca=() cb=()
    for i in $(seq "$PAIRS"); do
        if ((i % 2)); then
            oa=$(run "$PA" 26263 "$profile"); ob=$(run "$PB" 26264 "$profile")
        else
            ob=$(run "$PB" 26264 "$profile"); oa=$(run "$PA" 26263 "$profile")
        fi
        read -r a_r a_c <<<"$oa"
        read -r b_r b_c <<<"$ob"
        ra+=("$a_r") rb+=("$b_r") ca+=("$a_c") cb+=("$b_c")
        ratios+=("$(awk -v a="$a_r" -v b="$b_r" 'BEGIN{printf "%.4f", b/a}')")
    done
    printf '%-12s B/A %.3f (%.2f-%.2f), B ahead in %d of %d pairs; msgs/s A %.0f, B %.0f; CPU µs/msg A %.1f, B %.1f\n' \
        "$profile" "$(printf '%s\n' "${ratios[@]}" | median)" \
        "$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)" "$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)" \
        "$(printf '%s\n' "${ratios[@]}" | awk '$1 > 1' | wc -l)" "$PAIRS" \
        "$(printf '%s\n' "${ra[@]}" | median)" "$(printf '%s\n' "${rb[@]}" | median)" \
        "$(printf '%s\n' "${ca[@]}" | median)" "$(printf '%s\n' "${cb[@]}" | median)"
done
printf '# load average at end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
