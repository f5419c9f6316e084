#!/usr/bin/env bash
# floodgate against nginx's stream byte relay, pair by pair: for each profile, PAIRS times one
# run through each relay back to back (the order swapped every other pair), and the ratio of
# floodgate's msgs/s to nginx's taken within each pair. On a machine whose speed drifts (two
# cores shared by smtp-source, the relay and smtp-sink), a pair's two runs see the same
# machine, so the median of the pairs' ratios moves much less than a ratio of medians.
#
#   benches/paired.sh [-n PAIRS] [-m MESSAGES] [-F "PROFILES"]   (defaults: 16, 6000, all four)
#
# Same parts and ports as the shared harness (../shared/bench): smtp-sink on 26250, nginx
# stream on 26258, floodgate on 26259 (see floodgate-up.sh). Prints one line per profile:
# the median ratio with its range, pairs floodgate won, and each relay's median msgs/s. Every
# run must deliver every message (checked against the sink's counter), else it stops.
set -euo pipefail
PAIRS=16 M=6000 PROFILES="small small-reuse big big-reuse"
while getopts "n:m:F:h" o; do
    case "$o" in
        n) PAIRS=$OPTARG ;;
        m) M=$OPTARG ;;
        F) PROFILES=$OPTARG ;;
        h) sed -n '2,13p' "$0"; exit 0 ;;
        *) exit 2 ;;
    esac
done
[[ $PAIRS =~ ^[1-9][0-9]*$ && $M =~ ^[1-9][0-9]*$ ]] || { echo "-n and -m take a count" >&2; exit 2; }
for profile in $PROFILES; do
    case "$profile" in
        small | small-reuse | big | big-reuse) ;;
        *) echo "unknown profile $profile (small, small-reuse, big, big-reuse)" >&2; exit 2 ;;
    esac
done
. "$(dirname "$0")/floodgate-up.sh"
SINKLOG="$TMP/sink.log" SINK="" NS=""
# Set before the sink and nginx start, so floodgate is stopped if either fails to.
trap 'kill $NS $SINK 2>/dev/null; floodgate_down' EXIT
SINK=$("$HARNESS/sink.sh" -p 26250 -L "$SINKLOG")
NS=$("$HARNESS/relay-nstream.sh" -d "$TMP/nstream" -p 26258 -u 127.0.0.1:26250)

flags() {
    case "$1" in
        small) echo "-r 1 -l 1024" ;;
        small-reuse) echo "-r 1 -l 1024 -d" ;;
        big) echo "-r 5 -l 20480" ;;
        big-reuse) echo "-r 5 -l 20480 -d" ;;
    esac
}

# run PORT PROFILE: msgs/s of one load.sh run, after checking every message arrived.
run() {
    local line sent delivered
    # shellcheck disable=SC2046
    line=$("$HARNESS/load.sh" -t "127.0.0.1:$1" -s 10 -m "$M" $(flags "$2") -k "$SINKLOG")
    sent=$(grep -o 'sent=[0-9]*' <<<"$line" | cut -d= -f2)
    delivered=$(grep -o 'delivered=[0-9]*' <<<"$line" | cut -d= -f2)
    if [[ $sent != "$M" || $delivered != "$M" ]]; then
        echo "port $1, $2: sent=$sent delivered=$delivered of $M" >&2
        exit 1
    fi
    grep -o 'msgs_per_s=[0-9.]*' <<<"$line" | cut -d= -f2
}

median() { sort -g | awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

for profile in $PROFILES; do
    ratios=() fgs=() nss=()
    for i in $(seq "$PAIRS"); do
        if ((i % 2)); then
            ns=$(run 26258 "$profile"); fg=$(run 26259 "$profile")
        else
            fg=$(run 26259 "$profile"); ns=$(run 26258 "$profile")
        fi
        fgs+=("$fg") nss+=("$ns")
        ratios+=("$(awk -v a="$fg" -v b="$ns" 'BEGIN{printf "%.4f", a/b}')")
    done
    r=$(printf '%s\n' "${ratios[@]}" | median)
    lo=$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)
    hi=$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)
    won=$(printf '%s\n' "${ratios[@]}" | awk '$1 > 1' | wc -l)
    printf '%-12s floodgate/nginx-stream %.3f (%.2f-%.2f), floodgate ahead in %d of %d pairs; msgs/s floodgate %.0f, nginx %.0f\n' \
        "$profile" "$r" "$lo" "$hi" "$won" "$PAIRS" \
        "$(printf '%s\n' "${fgs[@]}" | median)" "$(printf '%s\n' "${nss[@]}" | median)"
done
