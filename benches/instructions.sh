#!/usr/bin/env bash
# User-space instructions per message: floodgate beside nginx's stream byte relay, per
# profile, counted by valgrind's callgrind. Instructions, unlike seconds, are the same from
# run to run whatever else the machine is doing, so two builds (or floodgate and nginx) can be
# compared on a noisy machine; they leave out the kernel (system calls, wake-ups), which
# benches/syscalls.sh and benches/paired.sh cover.
#
#   benches/instructions.sh [-m MESSAGES] [-F "PROFILES"] [-o DIR] [-c] [BIN...]
#       (defaults: 2000, "small small-reuse big big-reuse", a new /tmp dir; BIN: the
#       floodgate binaries to count, default the release build; -c also simulates the
#       caches and prints, per message, the first-level instruction and data cache misses
#       after the instructions: "Ir/I1-misses/D1-misses")
#
# For each profile and relay: the relay starts under callgrind with one event loop (nginx:
# one worker, no master; floodgate: workers = 1, [log] level info, so the per-message lines
# are written), 300 messages warm it up, its counters are zeroed, then MESSAGES messages of
# the profile go through (Postfix smtp-source -> relay -> smtp-sink, 127.0.0.1) and the
# counters are dumped. Prints instructions per message for each relay and the ratio of each
# floodgate binary to nginx. With -o, the callgrind files are kept there (callgrind_annotate
# --inclusive=yes FILE shows where they go). Every process started is stopped by PID on exit.
set -euo pipefail
M=2000 PROFILES="small small-reuse big big-reuse" OUT="" CACHE=""
while getopts "m:F:o:ch" o; do
    case "$o" in
        m) M=$OPTARG ;;
        F) PROFILES=$OPTARG ;;
        o) OUT=$OPTARG ;;
        c) CACHE="--cache-sim=yes" ;;
        h) sed -n '2,21p' "$0"; exit 0 ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ $M =~ ^[1-9][0-9]*$ ]] || { echo "-m takes a count" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HARNESS=${HARNESS:-$ROOT/../shared/bench}
[[ -x $HARNESS/load.sh ]] || { echo "no harness at $HARNESS" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is needed (Debian: valgrind)" >&2; exit 1; }
BINS=("$@")
if ((${#BINS[@]} == 0)); then
    cargo build --release --manifest-path "$ROOT/Cargo.toml" --bin floodgate
    BINS=("$ROOT/target/release/floodgate")
fi
for b in "${BINS[@]}"; do [[ -x $b ]] || { echo "not an executable: $b" >&2; exit 2; }; done
TMP=$(mktemp -d /tmp/floodgate-instr.XXXXXX)
OUT=${OUT:-$TMP/out}
mkdir -p "$OUT"
SINK="" VG=""
cleanup() {
    [[ -n $VG ]] && { kill "$VG" 2>/dev/null; wait "$VG" 2>/dev/null || true; }
    [[ -n $SINK ]] && kill "$SINK" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
SINK=$("$HARNESS/sink.sh" -p 26250 -L "$TMP/sink.log")

flags() {
    case "$1" in
        small) echo "-r 1 -l 1024" ;;
        small-reuse) echo "-r 1 -l 1024 -d" ;;
        big) echo "-r 5 -l 20480" ;;
        big-reuse) echo "-r 5 -l 20480 -d" ;;
        *) echo "unknown profile $1" >&2; exit 2 ;;
    esac
}

cat >"$TMP/nginx.conf" <<NGINX
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
master_process off;
daemon off;
worker_processes 1;
pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log warn;
events { worker_connections 4096; }
stream {
    server {
        listen 127.0.0.1:26258 backlog=1024;
        proxy_pass 127.0.0.1:26250;
        proxy_buffer_size 64k;
    }
}
NGINX
cat >"$TMP/floodgate.toml" <<TOML
[server]
max_connections_per_ip = 10000
workers = 1
[[listener]]
name = "bench"
address = "127.0.0.1:26259"
tls = "none"
[upstream]
address = "127.0.0.1:26250"
client_identity = "none"
[log]
level = "info"
TOML

# measure NAME PORT PROFILE CMD...: instructions per message of CMD under callgrind.
measure() {
    local name=$1 port=$2 profile=$3 file
    shift 3
    file="$OUT/$profile.$name.callgrind"
    # shellcheck disable=SC2086
    setsid valgrind --tool=callgrind $CACHE --callgrind-out-file="$TMP/cg.%p" "$@" \
        >"$TMP/$name.out" 2>"$TMP/$name.err" </dev/null &
    VG=$!
    for _ in $(seq 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
        sleep 0.1
    done
    # shellcheck disable=SC2046
    "$HARNESS/load.sh" -t "127.0.0.1:$port" -s 10 -m 300 -T 300 $(flags "$profile") >/dev/null
    callgrind_control -z "$VG" >/dev/null 2>&1
    # shellcheck disable=SC2046
    "$HARNESS/load.sh" -t "127.0.0.1:$port" -s 10 -m "$M" -T 600 $(flags "$profile") \
        -k "$TMP/sink.log" >"$TMP/load.out"
    grep -q "sent=$M " "$TMP/load.out" || { echo "$name $profile: load failed: $(cat "$TMP/load.out")" >&2; exit 1; }
    callgrind_control -d "$VG" >/dev/null 2>&1
    kill "$VG"; wait "$VG" 2>/dev/null || true
    VG=""
    mv "$(ls "$TMP"/cg.*.1)" "$file"
    rm -f "$TMP"/cg.*
    # PROGRAM TOTALS: each event's count and its share; with the cache simulation the events
    # are Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
    callgrind_annotate "$file" 2>/dev/null | awk -v m="$M" -v cache="$CACHE" '/PROGRAM TOTALS/ {
        gsub(",", ""); n = 0
        for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) v[++n] = $i
        if (cache == "") printf "%d\n", v[1] / m
        else printf "%d/%d/%d\n", v[1] / m, v[4] / m, (v[5] + v[6]) / m }'
}

echo "# $(date -u +%FT%TZ), $(nproc) cores, $M messages per run, user-space instructions by valgrind --tool=callgrind${CACHE:+ (Ir/I1 misses/D1 misses per message)}"
printf '%-12s %14s' profile nginx
for i in "${!BINS[@]}"; do printf ' %18s %8s' "floodgate$((i + 1))" ratio; done
echo
for profile in $PROFILES; do
    flags "$profile" >/dev/null
    ng=$(measure nginx 26258 "$profile" nginx -p "$TMP" -c "$TMP/nginx.conf")
    printf '%-12s %14s' "$profile" "$ng"
    for i in "${!BINS[@]}"; do
        fg=$(measure "floodgate$((i + 1))" 26259 "$profile" "${BINS[$i]}" run --config "$TMP/floodgate.toml")
        printf ' %18s %8s' "$fg" "$(awk -v a="${fg%%/*}" -v b="${ng%%/*}" 'BEGIN {printf "%.2f", a / b}')"
    done
    echo
done
for i in "${!BINS[@]}"; do echo "# floodgate$((i + 1)) = ${BINS[$i]}"; done
