#!/usr/bin/env bash
# System calls per message: floodgate beside nginx's stream byte relay, per profile, in one
# run of the shared harness's parts (Postfix smtp-source -> relay -> smtp-sink, all on
# 127.0.0.1). For each profile, one load through nginx stream, then one through floodgate,
# each counted with `perf stat -e 'syscalls:sys_enter_*'` attached to the relay (nginx's
# worker processes; every thread of floodgate, its log writer included); the counts are
# divided by the messages sent. Prints per profile and relay the total and each system
# call made at least 0.05 times per message (for floodgate also split by thread: the event
# loops floodgate-wN and the log writer floodgate-log), then the ratio floodgate/nginx of
# the totals.
#
#   benches/syscalls.sh [-m MESSAGES] [-F "PROFILES"] [-o DIR]
#       (defaults: 10000, "small small-reuse big big-reuse", a new /tmp dir)
#
# Needs perf with access to the syscalls tracepoints (root; tracefs mounted on
# /sys/kernel/tracing). Without them, STRACE=1 counts with `strace -c -f -p` instead, which
# slows the relay it watches (every call waits for strace) and so changes how its reads
# and waits interleave: its figures are only indicative. floodgate: benches/floodgate-up.sh
# (release build, port 26259, FLOODGATE_LOG_LEVEL defaults to info here: the per-message
# lines are written).
# Every process started is stopped by PID on exit.
set -euo pipefail
M=10000 PROFILES="small small-reuse big big-reuse" OUT=""
while getopts "m:F:o:h" o; do
    case "$o" in
        m) M=$OPTARG ;;
        F) PROFILES=$OPTARG ;;
        o) OUT=$OPTARG ;;
        h) sed -n '2,18p' "$0"; exit 0 ;;
        *) exit 2 ;;
    esac
done
[[ $M =~ ^[1-9][0-9]*$ ]] || { echo "-m takes a count" >&2; exit 2; }
export FLOODGATE_LOG_LEVEL=${FLOODGATE_LOG_LEVEL:-info}
. "$(dirname "$0")/floodgate-up.sh"
OUT=${OUT:-$TMP/syscalls}
mkdir -p "$OUT"
SINKLOG="$TMP/sink.log" SINK="" NS="" COUNTER=""
trap 'kill $COUNTER $NS $SINK 2>/dev/null; floodgate_down' EXIT
SINK=$("$HARNESS/sink.sh" -p 26250 -L "$SINKLOG")
NS=$("$HARNESS/relay-nstream.sh" -d "$TMP/nstream" -p 26258 -u 127.0.0.1:26250)

flags() {
    case "$1" in
        small) echo "-r 1 -l 1024" ;;
        small-reuse) echo "-r 1 -l 1024 -d" ;;
        big) echo "-r 5 -l 20480" ;;
        big-reuse) echo "-r 5 -l 20480 -d" ;;
        *) echo "unknown profile $1" >&2; exit 2 ;;
    esac
}

# count NAME PIDS PROFILE: one load through the relay whose processes are PIDS (comma
# separated), counted; leaves "name count" lines in $OUT/PROFILE.NAME and prints sent=N.
count() {
    local name=$1 pids=$2 profile=$3 port file line sent
    port=$([[ $name == nginx ]] && echo 26258 || echo 26259)
    file="$OUT/$profile.$name.raw"
    if [[ -n ${STRACE:-} ]]; then
        local args=()
        for p in ${pids//,/ }; do args+=(-p "$p"); done
        strace -c -f -o "$file" "${args[@]}" &
    else
        # Per thread, so floodgate's event loops and its log writer are told apart.
        perf stat --per-thread -x, -o "$file" -e 'syscalls:sys_enter_*' -p "$pids" &
    fi
    COUNTER=$!
    sleep 1 # attached before the load starts
    # shellcheck disable=SC2046
    line=$("$HARNESS/load.sh" -t "127.0.0.1:$port" -s 10 -m "$M" $(flags "$profile") -k "$SINKLOG")
    kill -INT "$COUNTER"
    wait "$COUNTER" 2>/dev/null || true
    COUNTER=""
    sent=$(grep -o 'sent=[0-9]*' <<<"$line" | cut -d= -f2)
    if [[ -n ${STRACE:-} ]]; then
        # "% time, seconds, usecs/call, calls, [errors,] syscall" rows, then a total row.
        awk '$1 ~ /^[0-9.]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" { print $NF, $4 }' \
            "$file" >"$OUT/$profile.$name"
    else
        # "comm-tid,count,,syscalls:sys_enter_NAME,..." per thread: "NAME count comm" lines,
        # then summed over the threads.
        awk -F, '$4 ~ /^syscalls:sys_enter_/ && $2 ~ /^[0-9]+$/ {
                ev = $4; sub("syscalls:sys_enter_", "", ev); comm = $1; sub(/-[0-9]+$/, "", comm)
                print ev, $2, comm }' "$file" >"$OUT/$profile.$name.threads"
        awk '{ n[$1] += $2 } END { for (k in n) print k, n[k] }' "$OUT/$profile.$name.threads" \
            >"$OUT/$profile.$name"
    fi
    echo "sent=$sent"
}

NSPIDS=$(pgrep -P "$NS" | sort -n | paste -sd,)
printf '# %s, %s cores, kernel %s, %s messages per run, counted with %s\n' \
    "$(date -u +%FT%TZ)" "$(nproc)" "$(uname -r)" "$M" \
    "$([[ -n ${STRACE:-} ]] && echo 'strace -c -f' || echo 'perf stat -e syscalls:sys_enter_*')"
printf '# load at start: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
for profile in $PROFILES; do
    ns_sent=$(count nginx "$NSPIDS" "$profile")
    fg_sent=$(count floodgate "$FG" "$profile")
    for name in nginx floodgate; do
        sent=$([[ $name == nginx ]] && echo "${ns_sent#sent=}" || echo "${fg_sent#sent=}")
        [[ $sent == "$M" ]] || { echo "$profile via $name: sent=$sent of $M" >&2; exit 1; }
        total=$(awk '{ t += $2 } END { print t + 0 }' "$OUT/$profile.$name")
        echo "$total" >"$OUT/$profile.$name.total"
        printf '%-12s %-9s %6.1f syscalls/msg:%s\n' "$profile" "$name" \
            "$(awk -v t="$total" -v m="$sent" 'BEGIN { print t / m }')" \
            "$(sort -k2,2gr "$OUT/$profile.$name" |
                awk -v m="$sent" '$2 / m >= 0.05 { printf " %s %.2f", $1, $2 / m }')"
        if [[ $name == floodgate && -s $OUT/$profile.$name.threads ]]; then
            # floodgate's threads by role: event loops (floodgate-wN), the log writer.
            for role in floodgate-w floodgate-log; do
                awk -v r="$role" '$3 ~ "^" r { print $1, $2 }' "$OUT/$profile.$name.threads" |
                    awk '{ n[$1] += $2 } END { for (k in n) print k, n[k] }' >"$OUT/$profile.$name.$role"
                printf '%-12s   %-14s %6.1f syscalls/msg:%s\n' "" "$role*" \
                    "$(awk -v m="$sent" '{ t += $2 } END { print t / m }' "$OUT/$profile.$name.$role")" \
                    "$(sort -k2,2gr "$OUT/$profile.$name.$role" |
                        awk -v m="$sent" '$2 / m >= 0.05 { printf " %s %.2f", $1, $2 / m }')"
            done
        fi
    done
    awk -v p="$profile" -v f="$(cat "$OUT/$profile.floodgate.total")" -v n="$(cat "$OUT/$profile.nginx.total")" \
        'BEGIN { printf "%-12s floodgate/nginx system calls per message: %.2f\n", p, f / n }'
done
echo "# raw counts in $OUT (removed at exit unless -o is given)"
