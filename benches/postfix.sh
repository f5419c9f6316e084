#!/usr/bin/env bash
# What floodgate adds to the cost of submission in front of a real Postfix: Postfix's
# smtp-source against (a) a private Postfix smtpd alone, (b) floodgate (release build,
# XCLIENT) in front of that same Postfix and (c) nginx's stream byte relay in front of it,
# round by round (one run of each, the order rotating), for small and big messages, with
# and without connection reuse. Reports per profile the median of the rounds' throughput
# ratios b/a, c/a and b/c with their ranges, each path's median msgs/s, floodgate's and
# nginx's CPU per message, and Postfix's CPU per message on each path (all from
# /proc/PID/stat utime+stime; Postfix's over its master and every process of its session,
# the reaped ones included through the master's cutime+cstime; nginx's over its master and
# workers). c/a is what any relay in front costs on the machine: the extra hop alone.
#
#   benches/postfix.sh [-n ROUNDS] [-m MESSAGES] [-s SESSIONS] [-F "PROFILES"] [-c CLIENT]
#                      [-w "MODES"] [-k]
#       defaults: 3 rounds, 5000 messages a run, 10 sessions, all four profiles, all modes
#       -w  what is measured against Postfix alone: proxy (floodgate and nginx in front, as
#           above), policy (the same Postfix asking floodgate as its policy service: see
#           "Policy mode" below) and/or milter (see "Milter mode" below)
#       -c  the load: smtp-source (default; it says HELO, which floodgate relays to Postfix
#           as EHLO: [upstream] always_ehlo) or ehlo (benches/ehlo_source.py: EHLO as mail
#           clients say it, then the same transactions); either way floodgate sends each
#           message to Postfix as one BDAT chunk and each MAIL with the first RCPT
#       -k  keep the run's directory (Postfix's maillog, floodgate's log) and say where
#
# Profiles (smtp-source flags, as ../shared/bench/bench.sh):
#   small        -r 1 -l 1024          one TCP connection per message
#   small-reuse  -r 1 -l 1024 -d       messages share the sessions' connections
#   big          -r 5 -l 20480         one TCP connection per message
#   big-reuse    -r 5 -l 20480 -d
#
# The Postfix instance is private: its own config_directory, queue and data directories and
# maillog file under one directory (on /dev/shm when it exists, so the figures measure the
# processes, not the disk; PF_BASE=/some/dir puts it elsewhere), a single smtpd listener on
# 127.0.0.1:26260, every recipient relayed to discard:, XCLIENT allowed from 127.0.0.0/8.
# Its master runs in the foreground in a session of its own and is stopped by its PID at
# exit. nginx (../shared/bench/relay-nstream.sh, 2 workers) listens on 127.0.0.1:26262.
# floodgate listens on 127.0.0.1:26261 with one warn-mode limit (per client IP and
# recipient, evaluated on every RCPT, set high enough never to be reached: a limit that is
# over logs a line per event), the memory store and info logging (the per-session and
# per-message lines written to a file); FLOODGATE_WORKERS=N sets its [server] workers
# (default: one event loop per core), FLOODGATE_CHUNKING=false its [upstream] chunking
# (messages with DATA even where Postfix offers CHUNKING), FLOODGATE_PIPELINING=false its
# [upstream] pipelining (every MAIL waits for Postfix's answer), FLOODGATE_ALWAYS_EHLO=false
# its [upstream] always_ehlo (smtp-source's HELO goes to Postfix as HELO, and with it no
# BDAT and no MAIL with the first RCPT; unset, the key is left out of the config, so a
# build from before it runs too). Every run must
# deliver every message: the maillog's status=sent lines are counted after each run (the
# next run starts once Postfix's queue is empty), else the script stops.
#
# Policy mode: a second smtpd of the same Postfix, on 127.0.0.1:26263, has
# check_policy_service unix:$DIR/floodgate/policy.sock in smtpd_recipient_restrictions and
# smtpd_end_of_data_restrictions (as the book's "Postfix's policy service" page: the bench's
# limit is at RCPT, none at DATA; with Postfix's default default_action, so a failing service stops
# the run instead of letting mail through unseen); the same floodgate serves that socket
# ([[policy_service]]) with the same limit. Per profile, rounds of Postfix alone, Postfix
# with the policy service and Postfix with the null one (below; the order rotating) give
# the median ratios with their ranges, each path's median msgs/s, and floodgate's, the null
# service's and Postfix's CPU per message.
#
# Milter mode: a third smtpd of the same Postfix, on 127.0.0.1:26264, has smtpd_milters =
# unix:$DIR/floodgate/milter.sock with milter_protocol = 6 and milter_default_action =
# tempfail (as the book's "floodgate as a Postfix milter" page, so a failing milter stops the
# run); the same floodgate serves that socket ([[milter]]) with the same limit, reported as
# policy mode is (with the null milter). Without proxy mode, no nginx is needed.
#
# The ceiling of both modes: what Postfix itself spends on asking any service. Two more
# smtpds of the same Postfix, on 127.0.0.1:26265 (policy) and 127.0.0.1:26266 (milter), ask
# the cheapest service there can be instead of floodgate (benches/support/null_services.rs,
# built with rustc -O: threads started once, blocking reads and writes; the policy
# service answers every request DUNNO, the milter asks Postfix to leave out every event it
# may leave out and answers each end of message continue). Each round of policy or milter
# mode runs it too (the order of the three rotating), and each profile reports its ratio to
# Postfix alone: no policy service or milter, floodgate or any other, can keep more of
# Postfix's throughput on this machine than that.
#
# Needs Debian's postfix package (/usr/sbin/postfix, /usr/lib/postfix/sbin/master,
# smtp-source; no postfix daemon is started by it), root (Postfix's master starts as root),
# and ../shared/bench (load.sh). FLOODGATE_BIN overrides target/release/floodgate, which is
# built when missing.
set -euo pipefail
ROUNDS=3 M=5000 S=10 PROFILES="small small-reuse big big-reuse" KEEP=0 CLIENT=smtp-source
MODES="proxy policy milter"
while getopts "n:m:s:F:c:w:kh" o; do
    case "$o" in
        n) ROUNDS=$OPTARG ;;
        m) M=$OPTARG ;;
        s) S=$OPTARG ;;
        F) PROFILES=$OPTARG ;;
        c) CLIENT=$OPTARG ;;
        w) MODES=$OPTARG ;;
        k) KEEP=1 ;;
        h) sed -n '2,79p' "$0"; exit 0 ;;
        *) exit 2 ;;
    esac
done
for v in "$ROUNDS" "$M" "$S"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "-n, -m and -s take a count" >&2; exit 2; }
done
flags() {
    case "$1" in
        small) echo "-r 1 -l 1024" ;;
        small-reuse) echo "-r 1 -l 1024 -d" ;;
        big) echo "-r 5 -l 20480" ;;
        big-reuse) echo "-r 5 -l 20480 -d" ;;
        *) return 1 ;;
    esac
}
case $CLIENT in
    smtp-source | ehlo) ;;
    *) echo "unknown client $CLIENT (smtp-source, ehlo)" >&2; exit 2 ;;
esac
case ${FLOODGATE_CHUNKING:-true} in
    true | false) ;;
    *) echo "FLOODGATE_CHUNKING is true or false" >&2; exit 2 ;;
esac
case ${FLOODGATE_PIPELINING:-true} in
    true | false) ;;
    *) echo "FLOODGATE_PIPELINING is true or false" >&2; exit 2 ;;
esac
case ${FLOODGATE_ALWAYS_EHLO:-true} in
    true | false) ;;
    *) echo "FLOODGATE_ALWAYS_EHLO is true or false" >&2; exit 2 ;;
esac
for m in $MODES; do
    case $m in
        proxy | policy | milter) ;;
        *) echo "unknown mode $m (proxy, policy, milter)" >&2; exit 2 ;;
    esac
done
mode() { [[ " $MODES " == *" $1 "* ]]; }
for p in $PROFILES; do
    flags "$p" >/dev/null || { echo "unknown profile $p (small, small-reuse, big, big-reuse)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "Postfix's master must start as root" >&2; exit 2; }
for f in /usr/sbin/postfix /usr/sbin/postconf /usr/lib/postfix/sbin/master; do
    [[ -x $f ]] || { echo "$f missing: install Debian's postfix package" >&2; exit 2; }
done
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HARNESS=${HARNESS:-$ROOT/../shared/bench}
[[ -x $HARNESS/load.sh ]] || { echo "no harness at $HARNESS" >&2; exit 2; }
FGBIN=${FLOODGATE_BIN:-$ROOT/target/release/floodgate}
if [[ ! -x $FGBIN ]]; then
    cargo build --release --manifest-path "$ROOT/Cargo.toml" --bin floodgate
fi
PF_PORT=26260 FG_PORT=26261 NS_PORT=26262 PP_PORT=26263 MI_PORT=26264 NP_PORT=26265 NM_PORT=26266
for port in $PF_PORT $FG_PORT $NS_PORT $PP_PORT $MI_PORT $NP_PORT $NM_PORT; do
    if ss -Hltn "sport = :$port" | grep -q .; then
        echo "port $port is in use" >&2
        exit 2
    fi
done

base=${PF_BASE:-/dev/shm}
[[ -d $base ]] || base=/tmp
DIR=$(mktemp -d "$base/floodgate-postfix-bench.XXXXXX")
chmod 755 "$DIR"
PF="$DIR/postfix" MASTER="" FG="" NS="" NULL=""
stop() {
    set +e # a stopped process's exit status is not a failure here
    [[ -n $FG ]] && kill "$FG" 2>/dev/null && wait "$FG" 2>/dev/null
    [[ -n $NULL ]] && kill "$NULL" 2>/dev/null && wait "$NULL" 2>/dev/null
    [[ -n $NS ]] && kill "$NS" 2>/dev/null
    if [[ -n $MASTER ]]; then
        kill "$MASTER" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$MASTER" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$MASTER" 2>/dev/null && kill -9 "$MASTER" 2>/dev/null
        wait "$MASTER" 2>/dev/null
        # The master's children (its session) end on their own once it is gone; they are
        # waited for (and stopped by PID if they linger) so the directory can be removed.
        local left
        for _ in $(seq 50); do
            left=$(ps -o pid= -s "$MASTER" | tr -d ' ' | paste -sd' ')
            [[ -z $left ]] && break
            sleep 0.1
        done
        # shellcheck disable=SC2086
        [[ -n $left ]] && kill -9 $left 2>/dev/null
    fi
    if ((KEEP)); then echo "# kept $DIR" >&2; else rm -rf "$DIR"; fi
}
trap stop EXIT

# --- the private Postfix -------------------------------------------------------------------
mkdir -p "$PF/conf" "$PF/queue" "$PF/data"
chown postfix:postfix "$PF/data"
cat >"$PF/conf/main.cf" <<EOF
# benches/postfix.sh: a private Postfix that relays every message to discard:
compatibility_level = 3.6
queue_directory = $PF/queue
data_directory = $PF/data
maillog_file = $PF/maillog
maillog_file_prefixes = $PF
myhostname = smarthost.bench
mydomain = smarthost.bench
myorigin = \$myhostname
mydestination =
relay_domains =
local_recipient_maps =
inet_interfaces = loopback-only
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
smtpd_authorized_xclient_hosts = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject
default_transport = discard:benchmark
relay_transport = discard:benchmark
smtp_dns_support_level = disabled
biff = no
in_flow_delay = 0s
smtpd_error_sleep_time = 0
smtpd_client_connection_count_limit = 0
smtpd_peername_lookup = no
# Policy mode: the restrictions of the smtpd on $PP_PORT (master.cf -o).
floodgate_policy = check_policy_service unix:$DIR/floodgate/policy.sock
null_policy = check_policy_service unix:$DIR/null/policy.sock
EOF
cat >"$PF/conf/master.cf" <<EOF
127.0.0.1:$PF_PORT inet n - n - - smtpd
127.0.0.1:$PP_PORT inet n - n - - smtpd
  -o smtpd_recipient_restrictions=\$floodgate_policy
  -o smtpd_end_of_data_restrictions=\$floodgate_policy
pickup    unix  n - n 60    1 pickup
cleanup   unix  n - n -     0 cleanup
qmgr      unix  n - n 300   1 qmgr
rewrite   unix  - - n -     - trivial-rewrite
bounce    unix  - - n -     0 bounce
defer     unix  - - n -     0 bounce
trace     unix  - - n -     0 bounce
verify    unix  - - n -     1 verify
flush     unix  n - n 1000? 0 flush
proxymap  unix  - - n -     - proxymap
proxywrite unix - - n -     1 proxymap
showq     unix  n - n -     - showq
error     unix  - - n -     - error
retry     unix  - - n -     - error
discard   unix  - - n -     - discard
anvil     unix  - - n -     1 anvil
scache    unix  - - n -     1 scache
postlog   unix-dgram n - n - 1 postlogd
EOF
# Milter mode: a third smtpd with floodgate as its milter.
MILTER_SOCK="$DIR/floodgate/milter.sock"
if mode milter; then
    cat >>"$PF/conf/master.cf" <<EOF
127.0.0.1:$MI_PORT inet n - n - - smtpd
  -o smtpd_milters=unix:$MILTER_SOCK
  -o milter_protocol=6
  -o milter_default_action=tempfail
EOF
fi
# The ceiling: two more smtpds asking the null services instead.
if mode policy; then
    cat >>"$PF/conf/master.cf" <<EOF
127.0.0.1:$NP_PORT inet n - n - - smtpd
  -o smtpd_recipient_restrictions=\$null_policy
  -o smtpd_end_of_data_restrictions=\$null_policy
EOF
fi
if mode milter; then
    cat >>"$PF/conf/master.cf" <<EOF
127.0.0.1:$NM_PORT inet n - n - - smtpd
  -o smtpd_milters=unix:$DIR/null/milter.sock
  -o milter_protocol=6
  -o milter_default_action=tempfail
EOF
fi
err=$(/usr/sbin/postconf -c "$PF/conf" -n 2>&1 >/dev/null) || true
[[ $err != *fatal* ]] || { echo "postconf: $err" >&2; exit 1; }
/usr/sbin/postfix -c "$PF/conf" check >&2 || { cat "$PF/maillog" >&2 2>/dev/null; exit 1; }
setsid /usr/lib/postfix/sbin/master -d -c "$PF/conf" </dev/null >"$DIR/master.out" 2>&1 &
MASTER=$!

# --- floodgate in front of it ----------------------------------------------------------------
mkdir -p "$DIR/floodgate"
cat >"$DIR/floodgate/floodgate.toml" <<EOF
[server]
max_connections_per_ip = 10000
workers = ${FLOODGATE_WORKERS:-0}
[[listener]]
name = "bench"
address = "127.0.0.1:$FG_PORT"
tls = "none"
[upstream]
address = "127.0.0.1:$PF_PORT"
client_identity = "xclient"
chunking = ${FLOODGATE_CHUNKING:-true}
pipelining = ${FLOODGATE_PIPELINING:-true}
${FLOODGATE_ALWAYS_EHLO:+always_ehlo = $FLOODGATE_ALWAYS_EHLO}
[[policy_service]]
name = "bench-policy"
listen = "unix:$DIR/floodgate/policy.sock"
mode = "0666"
[log]
level = "info"
[[limit]]
name = "per-ip"
ratelimit = "100000000 / 1h / per_rcpt / strict"
action = "warn"
EOF
if mode milter; then
    cat >>"$DIR/floodgate/floodgate.toml" <<EOF
[[milter]]
name = "bench-milter"
listen = "unix:$MILTER_SOCK"
mode = "0666"
EOF
fi
setsid "$FGBIN" run --config "$DIR/floodgate/floodgate.toml" </dev/null \
    >"$DIR/floodgate/stdout" 2>"$DIR/floodgate/log" &
FG=$!

# --- the null services, the ceiling of policy and milter mode ------------------------------
if mode policy || mode milter; then
    mkdir -p "$DIR/null"
    rustc -O --edition 2021 "$ROOT/benches/support/null_services.rs" -o "$DIR/null/null_services"
    setsid "$DIR/null/null_services" "$DIR/null/policy.sock" "$DIR/null/milter.sock" </dev/null \
        >"$DIR/null/log" 2>&1 &
    NULL=$!
fi

# --- nginx's stream byte relay in front of it, for comparison ------------------------------
if mode proxy; then
    NS=$("$HARNESS/relay-nstream.sh" -d "$DIR/nstream" -p $NS_PORT -u 127.0.0.1:$PF_PORT)
fi

ready() { # PORT: greets with 220 within 10 s
    local i
    for i in $(seq 100); do
        if { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null; then
            local g=""
            read -r -t 5 g <&3 || true
            exec 3>&-
            [[ $g == 220* ]] && return 0
        fi
        sleep 0.1
    done
    return 1
}
ready $PF_PORT || { echo "Postfix did not greet on $PF_PORT" >&2; cat "$DIR/master.out" "$PF/maillog" >&2 2>/dev/null; exit 1; }
ready $FG_PORT || { echo "floodgate did not greet on $FG_PORT" >&2; cat "$DIR/floodgate/log" >&2; exit 1; }
if mode proxy; then
    ready $NS_PORT || { echo "nginx did not relay Postfix's greeting on $NS_PORT" >&2; exit 1; }
fi
ready $PP_PORT || { echo "Postfix did not greet on $PP_PORT" >&2; exit 1; }
for _ in $(seq 100); do [[ -S $DIR/floodgate/policy.sock ]] && break; sleep 0.1; done
[[ -S $DIR/floodgate/policy.sock ]] || { echo "no policy socket" >&2; cat "$DIR/floodgate/log" >&2; exit 1; }
! mode milter || ready $MI_PORT || { echo "Postfix with floodgate's milter did not greet on $MI_PORT" >&2; cat "$PF/maillog" "$DIR/floodgate/log" >&2; exit 1; }
! mode policy || ready $NP_PORT || { echo "Postfix asking the null policy service did not greet on $NP_PORT" >&2; exit 1; }
! mode milter || ready $NM_PORT || { echo "Postfix with the null milter did not greet on $NM_PORT" >&2; exit 1; }
if [[ -n $NULL ]]; then
    for _ in $(seq 100); do [[ -S $DIR/null/milter.sock ]] && break; sleep 0.1; done
    [[ -S $DIR/null/milter.sock ]] || { echo "the null services did not start" >&2; cat "$DIR/null/log" >&2; exit 1; }
fi

TICK=$(getconf CLK_TCK)
# Postfix's CPU ticks so far: every live process of the master's session (utime+stime) and
# what the master reaped (cutime+cstime).
pf_ticks() {
    local t=0 p v
    for p in $(ps -o pid= -s "$MASTER"); do
        v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) || v=0
        t=$((t + ${v:-0}))
    done
    v=$(awk '{print $16 + $17}' "/proc/$MASTER/stat")
    echo $((t + v))
}
fg_ticks() { awk '{print $14 + $15}' "/proc/$FG/stat"; }
# The null services' CPU ticks so far.
null_ticks() { if [[ -n $NULL ]]; then awk '{print $14 + $15}' "/proc/$NULL/stat"; else echo 0; fi; }
# nginx's CPU ticks so far: its master and workers.
ns_ticks() {
    local t=0 p
    [[ -n $NS ]] || { echo 0; return; }
    for p in "$NS" $(pgrep -P "$NS"); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    done
    echo $t
}
delivered() { grep -c 'status=sent' "$PF/maillog" 2>/dev/null || true; }

# run PORT PROFILE: "msgs/s floodgate-µs/msg nginx-µs/msg postfix-µs/msg null-µs/msg" of one
# load.sh run, once Postfix has delivered every message of it.
run() {
    local line sent rate f0 f1 n0 n1 p0 p1 z0 z1 rcpts got before want
    before=$(delivered) f0=$(fg_ticks) n0=$(ns_ticks) p0=$(pf_ticks) z0=$(null_ticks)
    if [[ $CLIENT == ehlo ]]; then
        # shellcheck disable=SC2046
        line=$(timeout -k 5 610 python3 "$ROOT/benches/ehlo_source.py" -t "127.0.0.1:$1" -s "$S" \
            -m "$M" $(flags "$2") -T 600) || true
    else
        # shellcheck disable=SC2046
        line=$("$HARNESS/load.sh" -t "127.0.0.1:$1" -s "$S" -m "$M" $(flags "$2") -T 600)
    fi
    sent=$(grep -o 'sent=[0-9]*' <<<"$line" | cut -d= -f2)
    rcpts=$(grep -o 'rcpts=[0-9]*' <<<"$line" | cut -d= -f2)
    if [[ $sent != "$M" ]]; then
        echo "port $1, $2: sent=$sent of $M ($line)" >&2
        exit 1
    fi
    want=$((before + M * rcpts))
    # Delivery to discard: is part of what Postfix spends on the run: wait for it (bounded).
    for _ in $(seq 1200); do
        got=$(delivered)
        ((got >= want)) && break
        sleep 0.1
    done
    if ((got != want)); then
        echo "port $1, $2: Postfix delivered $((got - before)) recipients, expected $((want - before))" >&2
        exit 1
    fi
    f1=$(fg_ticks) n1=$(ns_ticks) p1=$(pf_ticks) z1=$(null_ticks)
    rate=$(grep -o 'msgs_per_s=[0-9.]*' <<<"$line" | cut -d= -f2)
    awk -v r="$rate" -v t="$TICK" -v m="$M" -v f="$((f1 - f0))" -v n="$((n1 - n0))" -v p="$((p1 - p0))" \
        -v z="$((z1 - z0))" \
        'BEGIN { printf "%s %.1f %.1f %.1f %.1f\n", r, f / t * 1e6 / m, n / t * 1e6 / m, p / t * 1e6 / m, z / t * 1e6 / m }'
}

median() { sort -g | awk '{v[NR]=$1} END{if (NR) print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

printf '# modes %s; %s, %s cores (%s), kernel %s; Postfix %s; %s messages a run, %s sessions, %s rounds; client %s; floodgate chunking %s, pipelining %s, always_ehlo %s\n' \
    "$MODES" "$(date -u +%FT%TZ)" "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
    "$(uname -r)" "$(/usr/sbin/postconf -d -h mail_version)" "$M" "$S" "$ROUNDS" "$CLIENT" "${FLOODGATE_CHUNKING:-true}" "${FLOODGATE_PIPELINING:-true}" "${FLOODGATE_ALWAYS_EHLO:-default}"
printf '# load average at start: %s; Postfix queue under %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" "$base"
# range: "median (min-max)" of the numbers on standard input.
range() {
    local v
    v=$(cat)
    printf '%.3f (%.2f-%.2f)' "$(median <<<"$v")" "$(sort -g <<<"$v" | head -1)" "$(sort -g <<<"$v" | tail -1)"
}
# round ROUND PROFILE PORT_A PORT_B PORT_C: run() on the three ports, the order rotating
# with ROUND (a, b, c; b, c, a; c, a, b); prints their results as three lines, a's first.
# A failed run fails it (and the assignment of its output stops the script): called in a
# command substitution, it runs without set -e.
round() {
    local a b c
    case $(($1 % 3)) in
        1) a=$(run "$3" "$2") && b=$(run "$4" "$2") && c=$(run "$5" "$2") || return 1 ;;
        2) b=$(run "$4" "$2") && c=$(run "$5" "$2") && a=$(run "$3" "$2") || return 1 ;;
        0) c=$(run "$5" "$2") && a=$(run "$3" "$2") && b=$(run "$4" "$2") || return 1 ;;
    esac
    printf '%s\n%s\n%s\n' "$a" "$b" "$c"
}

# proxy PROFILE: Postfix alone, behind floodgate and behind nginx, ROUNDS rounds.
proxy() {
    local profile=$1 i out a b c ar ap br bf bp cr cn cp
    local ratios=() nsratios=() fgns=() pfr=() fgr=() nsr=() fgcpu=() nscpu=() pfcpu_alone=() pfcpu_behind=() pfcpu_ns=()
    for i in $(seq "$ROUNDS"); do
        out=$(round "$i" "$profile" $PF_PORT $FG_PORT $NS_PORT)
        { read -r a; read -r b; read -r c; } <<<"$out"
        read -r ar _ _ ap _ <<<"$a"
        read -r br bf _ bp _ <<<"$b"
        read -r cr _ cn cp _ <<<"$c"
        pfr+=("$ar") fgr+=("$br") nsr+=("$cr") fgcpu+=("$bf") nscpu+=("$cn")
        pfcpu_alone+=("$ap") pfcpu_behind+=("$bp") pfcpu_ns+=("$cp")
        ratios+=("$(awk -v a="$ar" -v b="$br" 'BEGIN{printf "%.4f", b/a}')")
        nsratios+=("$(awk -v a="$ar" -v c="$cr" 'BEGIN{printf "%.4f", c/a}')")
        fgns+=("$(awk -v b="$br" -v c="$cr" 'BEGIN{printf "%.4f", b/c}')")
    done
    printf '%-12s floodgate+Postfix / Postfix alone %s, nginx-stream+Postfix / Postfix alone %s, floodgate / nginx-stream %s over %d rounds\n' \
        "$profile" "$(printf '%s\n' "${ratios[@]}" | range)" "$(printf '%s\n' "${nsratios[@]}" | range)" \
        "$(printf '%s\n' "${fgns[@]}" | range)" "$ROUNDS"
    printf '%-12s msgs/s Postfix alone %.0f, behind floodgate %.0f, behind nginx %.0f\n' "" \
        "$(printf '%s\n' "${pfr[@]}" | median)" "$(printf '%s\n' "${fgr[@]}" | median)" \
        "$(printf '%s\n' "${nsr[@]}" | median)"
    printf '%-12s CPU µs/msg: floodgate %.0f, nginx %.0f; Postfix alone %.0f, behind floodgate %.0f, behind nginx %.0f\n' "" \
        "$(printf '%s\n' "${fgcpu[@]}" | median)" "$(printf '%s\n' "${nscpu[@]}" | median)" \
        "$(printf '%s\n' "${pfcpu_alone[@]}" | median)" "$(printf '%s\n' "${pfcpu_behind[@]}" | median)" \
        "$(printf '%s\n' "${pfcpu_ns[@]}" | median)"
}

# asked PROFILE WHAT PORT NULL_PORT: Postfix alone, asking floodgate (on PORT) and asking the
# null service (on NULL_PORT), ROUNDS rounds; WHAT names the mode in the report.
asked() {
    local profile=$1 what=$2 port=$3 nport=$4 i out a b c ar ap br bf bp cr cp cz
    local ratios=() ceilings=() ofceiling=() pfr=() fgr=() nr=() fgcpu=() nullcpu=()
    local pfcpu_alone=() pfcpu_fg=() pfcpu_null=()
    for i in $(seq "$ROUNDS"); do
        out=$(round "$i" "$profile" $PF_PORT "$port" "$nport")
        { read -r a; read -r b; read -r c; } <<<"$out"
        read -r ar _ _ ap _ <<<"$a"
        read -r br bf _ bp _ <<<"$b"
        read -r cr _ _ cp cz <<<"$c"
        pfr+=("$ar") fgr+=("$br") nr+=("$cr") fgcpu+=("$bf") nullcpu+=("$cz")
        pfcpu_alone+=("$ap") pfcpu_fg+=("$bp") pfcpu_null+=("$cp")
        ratios+=("$(awk -v a="$ar" -v b="$br" 'BEGIN{printf "%.4f", b/a}')")
        ceilings+=("$(awk -v a="$ar" -v c="$cr" 'BEGIN{printf "%.4f", c/a}')")
        ofceiling+=("$(awk -v b="$br" -v c="$cr" 'BEGIN{printf "%.4f", b/c}')")
    done
    printf '%-12s %s: Postfix with floodgate / Postfix alone %s, with the null service / alone (the ceiling) %s, floodgate / the null service %s over %d rounds\n' \
        "$profile" "$what" "$(printf '%s\n' "${ratios[@]}" | range)" "$(printf '%s\n' "${ceilings[@]}" | range)" \
        "$(printf '%s\n' "${ofceiling[@]}" | range)" "$ROUNDS"
    printf '%-12s msgs/s Postfix alone %.0f, with floodgate %.0f, with the null service %.0f\n' "" \
        "$(printf '%s\n' "${pfr[@]}" | median)" "$(printf '%s\n' "${fgr[@]}" | median)" \
        "$(printf '%s\n' "${nr[@]}" | median)"
    printf '%-12s CPU µs/msg: floodgate %.0f, the null service %.0f; Postfix alone %.0f, with floodgate %.0f, with the null service %.0f\n' "" \
        "$(printf '%s\n' "${fgcpu[@]}" | median)" "$(printf '%s\n' "${nullcpu[@]}" | median)" \
        "$(printf '%s\n' "${pfcpu_alone[@]}" | median)" "$(printf '%s\n' "${pfcpu_fg[@]}" | median)" \
        "$(printf '%s\n' "${pfcpu_null[@]}" | median)"
}

for profile in $PROFILES; do
    if mode proxy; then proxy "$profile"; fi
    if mode policy; then asked "$profile" "policy service" $PP_PORT $NP_PORT; fi
    if mode milter; then asked "$profile" "milter" $MI_PORT $NM_PORT; fi
done
printf '# load average at end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
