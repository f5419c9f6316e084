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
# stream on 26258, floodgate on 26259 (see floodgate-up.sh). Prints two lines per profile:
# the median ratio with its range, pairs floodgate won, and each relay's median msgs/s; then
# each relay's median CPU µs per message with its user and system parts, and in how many runs
# one worker did nearly all of a relay's work (90 % of its workers' CPU or more). nginx's
# workers race to accept, so on long-lived connections some runs end with every session on one
# worker, which costs less CPU per message on a small machine; floodgate spreads sessions
# evenly, and the ratio is also given over the pairs where nginx spread them (when there are
# both kinds). Every run must deliver every message (checked against the sink's counter), else
# it stops.
set -euo pipefail
PAIRS=16 M=6000 PROFILES="small small-reuse big big-reuse"
while getopts "n:m:F:h" o; do
    case "$o" in
        n) PAIRS=$OPTARG ;;
        m) M=$OPTARG ;;
        F) PROFILES=$OPTARG ;;
        h) sed -n '2,19p' "$0"; exit 0 ;;
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

# relay_ticks PORT: the CPU ticks each worker of the relay on PORT has used so far, in a
# fixed order (nginx's worker processes; floodgate's event-loop threads and its log writer),
# then "|" and the ticks of all of them in user space and in the kernel.
relay_ticks() {
    local stats
    if [[ $1 == 26258 ]]; then
        # shellcheck disable=SC2046
        stats=$(printf '/proc/%s/stat ' $(pgrep -P "$NS" | sort -n))
    else
        stats=$(grep -l -e '^floodgate-w' /proc/"$FG"/task/*/comm | sed 's/comm$/stat/' | tr '\n' ' ')
        stats+=$(grep -l -e '^floodgate-log' /proc/"$FG"/task/*/comm | sed 's/comm$/stat/' | tr '\n' ' ')
    fi
    # shellcheck disable=SC2086
    cat $stats | awk '{printf "%d ", $14 + $15; u += $14; k += $15} END {printf "| %d %d", u, k}'
}

TICK=$(getconf CLK_TCK)

# run PORT PROFILE: "msgs/s CPU-µs-per-message one-worker(0|1) user-µs system-µs" of one
# load.sh run, after checking every message arrived. One worker did the work when it used 90 %
# or more of the run's CPU over all workers. User and system time are the kernel's tick-based
# accounting of the same ticks.
run() {
    local line sent delivered rate before after
    before=$(relay_ticks "$1")
    # shellcheck disable=SC2046
    line=$("$HARNESS/load.sh" -t "127.0.0.1:$1" -s 10 -m "$M" $(flags "$2") -k "$SINKLOG")
    after=$(relay_ticks "$1")
    sent=$(grep -o 'sent=[0-9]*' <<<"$line" | cut -d= -f2)
    delivered=$(grep -o 'delivered=[0-9]*' <<<"$line" | cut -d= -f2)
    if [[ $sent != "$M" || $delivered != "$M" ]]; then
        echo "port $1, $2: sent=$sent delivered=$delivered of $M" >&2
        exit 1
    fi
    rate=$(grep -o 'msgs_per_s=[0-9.]*' <<<"$line" | cut -d= -f2)
    awk -v r="$rate" -v t="$TICK" -v m="$M" -v before="$before" -v after="$after" 'BEGIN {
        split(before, bp, "|"); split(after, ap, "|")
        n = split(bp[1], b, " "); split(ap[1], a, " ")
        for (i = 1; i <= n; i++) { d = a[i] - b[i]; sum += d; if (d > most) most = d }
        split(bp[2], bk, " "); split(ap[2], ak, " ")
        us = t * m / 1e6
        printf "%s %.1f %d %.1f %.1f\n", r, sum / us, (sum > 0 && most >= 0.9 * sum),
            (ak[1] - bk[1]) / us, (ak[2] - bk[2]) / us }'
}

median() { sort -g | awk '{v[NR]=$1} END{if (NR) print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

for profile in $PROFILES; do
    ratios=() fgs=() nss=() fgcpu=() nscpu=() split=() fgone=0 nsone=0
    fgu=() fgk=() nsu=() nsk=()
    for i in $(seq "$PAIRS"); do
        # Each run in an assignment of its own, so that a failed one stops the script.
        if ((i % 2)); then
            nso=$(run 26258 "$profile"); fgo=$(run 26259 "$profile")
        else
            fgo=$(run 26259 "$profile"); nso=$(run 26258 "$profile")
        fi
        read -r ns nc n1 nu nk <<<"$nso"
        read -r fg fc f1 fu fk <<<"$fgo"
        fgs+=("$fg") nss+=("$ns") fgcpu+=("$fc") nscpu+=("$nc")
        fgu+=("$fu") fgk+=("$fk") nsu+=("$nu") nsk+=("$nk")
        fgone=$((fgone + f1)) nsone=$((nsone + n1))
        ratio=$(awk -v a="$fg" -v b="$ns" 'BEGIN{printf "%.4f", a/b}')
        ratios+=("$ratio")
        ((n1)) || split+=("$ratio")
    done
    r=$(printf '%s\n' "${ratios[@]}" | median)
    lo=$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)
    hi=$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)
    won=$(printf '%s\n' "${ratios[@]}" | awk '$1 > 1' | wc -l)
    printf '%-12s floodgate/nginx-stream %.3f (%.2f-%.2f), floodgate ahead in %d of %d pairs; msgs/s floodgate %.0f, nginx %.0f\n' \
        "$profile" "$r" "$lo" "$hi" "$won" "$PAIRS" \
        "$(printf '%s\n' "${fgs[@]}" | median)" "$(printf '%s\n' "${nss[@]}" | median)"
    printf '%-12s relay CPU µs/msg floodgate %.1f (user %.1f, system %.1f), nginx %.1f (user %.1f, system %.1f); one worker did the work in %d of %d floodgate runs, %d of %d nginx runs' \
        "" "$(printf '%s\n' "${fgcpu[@]}" | median)" \
        "$(printf '%s\n' "${fgu[@]}" | median)" "$(printf '%s\n' "${fgk[@]}" | median)" \
        "$(printf '%s\n' "${nscpu[@]}" | median)" \
        "$(printf '%s\n' "${nsu[@]}" | median)" "$(printf '%s\n' "${nsk[@]}" | median)" \
        "$fgone" "$PAIRS" "$nsone" "$PAIRS"
    if ((nsone > 0 && ${#split[@]} > 0)); then
        printf '; floodgate/nginx where nginx spread them %.3f (%d pairs)' \
            "$(printf '%s\n' "${split[@]}" | median)" "${#split[@]}"
    fi
    echo
done
