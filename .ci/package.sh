#!/usr/bin/env bash
# Builds floodgate's .deb with the one documented command, unpacks it into a scratch root and
# checks it as installed:
#   - the files are there (the README, every page of the book, the CHANGELOG), the man pages
#     (with floodgate.toml(5)) and completions cover every subcommand, the maintainer
#     scripts and the init script are valid shell, /etc/floodgate/floodgate.toml and
#     /etc/logrotate.d/floodgate are conffiles;
#   - the binary is a release build (`floodgate --version` says so: no debug assertions);
#   - the installed config, its system paths moved into the scratch root and its listeners
#     onto free ports, for a service user (nobody when this runs as root) with the
#     directories the package's tmpfiles.d file makes: `floodgate check` names the missing
#     certificate, the package's make-certificate makes one; `check` run by root then
#     passes as the service's user and creates or changes nothing, and passes again run by
#     that user;
#   - started as the init script (the recipe without systemd) starts it: one message
#     relayed, admin verbs run by root as sudo and runuser leave them (the audit names the
#     person), logrotate's file (moved into the scratch root) rotates the event and audit
#     logs and new lines go to new files, reload and stop by the init script;
#   - postrm purge removes the state, runtime directory and certificate.
#
#   bash .ci/package.sh            (from the repository root; needs cargo-deb, dpkg, openssl,
#                                  logrotate, python3, and setpriv/runuser when run as root)
set -euo pipefail

cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}

step() { printf -- '-- %s\n' "$*"; }

# The documented command (doc: "Building the .deb"): the release build once, its man pages
# and completions, then the package (cargo deb finds the build up to date).
step "cargo run --release -- generate-docs target/deb-docs && cargo deb"
command -v cargo-deb >/dev/null || cargo install cargo-deb --locked </dev/null
rm -rf target/deb-docs target/debian
start=$(date +%s)
cargo run --release --bin floodgate -- generate-docs target/deb-docs
echo "release build (and docs): $(($(date +%s) - start)) s"
deb=$(cargo deb --output target/debian/ 2>&1 | tail -1)
[[ -f $deb ]] || { echo "cargo deb did not print the package path: $deb"; exit 1; }
ls -l "$deb"
dpkg-deb --info "$deb" | sed -n '1,40p'

root=$(mktemp -d)
run_pid=""
cleanup() {
    if [[ -n $run_pid ]]; then kill -KILL "$run_pid" 2>/dev/null || true; fi
    rm -rf "$root"
}
trap cleanup EXIT
step "dpkg -x into $root"
dpkg-deb -x "$deb" "$root"
dpkg-deb -e "$deb" "$root/DEBIAN"

fail=0
need() {
    if [[ ! -e $root/$1 ]]; then
        echo "missing in the package: /$1"
        fail=1
    fi
}
for f in usr/bin/floodgate etc/floodgate/floodgate.toml lib/systemd/system/floodgate.service \
    usr/lib/sysusers.d/floodgate.conf usr/lib/tmpfiles.d/floodgate.conf \
    usr/share/floodgate/make-certificate usr/share/floodgate/floodgate.init \
    etc/logrotate.d/floodgate usr/share/doc/floodgate/CHANGELOG.md \
    usr/share/floodgate/prometheus/floodgate-rules.yml usr/share/floodgate/grafana/floodgate.json \
    usr/share/bash-completion/completions/floodgate usr/share/zsh/vendor-completions/_floodgate \
    usr/share/fish/vendor_completions.d/floodgate.fish usr/share/doc/floodgate/README.md \
    usr/share/doc/floodgate/docs/SUMMARY.md; do
    need "$f"
done
[[ -x $root/usr/bin/floodgate ]] || { echo "/usr/bin/floodgate is not executable"; fail=1; }
[[ -x $root/usr/share/floodgate/make-certificate ]] ||
    { echo "/usr/share/floodgate/make-certificate is not executable"; fail=1; }
for c in /etc/floodgate/floodgate.toml /etc/logrotate.d/floodgate; do
    grep -qx "$c" "$root/DEBIAN/conffiles" || { echo "$c is not a conffile"; fail=1; }
done
for s in postinst postrm; do
    [[ -x $root/DEBIAN/$s ]] || { echo "no executable $s"; fail=1; }
    sh -n "$root/DEBIAN/$s" || fail=1
done
[[ -x $root/usr/share/floodgate/floodgate.init ]] || { echo "no executable init script"; fail=1; }
sh -n "$root/usr/share/floodgate/floodgate.init" || fail=1
sh -n "$root/usr/share/floodgate/make-certificate" || fail=1
cmp -s conf/deb/floodgate.toml "$root/etc/floodgate/floodgate.toml" ||
    { echo "/etc/floodgate/floodgate.toml is not conf/deb/floodgate.toml"; fail=1; }

step "the packaged binary is a release build"
version=$("$root/usr/bin/floodgate" --version)
echo "$version; $(stat -c %s "$root/usr/bin/floodgate") bytes"
[[ $version == *"(release build)" ]] ||
    { echo "the package carries a debug build: $version"; fail=1; }

# Every visible subcommand (from the installed binary's help) has its man page and is in
# the bash completion.
subs=$("$root/usr/bin/floodgate" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR>1 && $1 != "help" {print $1}')
[[ -n $subs ]] || { echo "no subcommands in floodgate --help"; fail=1; }
need usr/share/man/man1/floodgate.1.gz
[[ -e $root/usr/share/man/man5/floodgate.toml.5.gz || -e $root/usr/share/man/man5/floodgate.toml.5 ]] ||
    { echo "no man page floodgate.toml(5)"; fail=1; }
# Every page of the book is in the package, where README.md is.
while IFS= read -r page; do
    need "usr/share/doc/floodgate/$page"
done < <(find docs -name '*.md' | sort)
for s in $subs; do
    if [[ ! -e $root/usr/share/man/man1/floodgate-$s.1.gz && ! -e $root/usr/share/man/man1/floodgate-$s.1 ]]; then
        echo "no man page for floodgate $s"
        fail=1
    fi
    grep -qw -- "$s" "$root/usr/share/bash-completion/completions/floodgate" ||
        { echo "bash completion lacks $s"; fail=1; }
done
echo "subcommands with man pages and completions: $(echo $subs | wc -w)"

step "the installed config, for the service's user"
# The user the service runs as: nobody (with its own group) when this runs as root, else
# this user. "${as_user[@]}" CMD runs CMD as that user.
if [[ $(id -u) -eq 0 ]]; then
    user=nobody
    group=$(id -gn nobody)
    as_user=(setpriv --reuid="$user" --regid="$group" --init-groups --)
else
    user=$(id -un)
    group=$(id -gn)
    as_user=()
fi
chmod 0755 "$root"
# The directories of the package's tmpfiles.d file (what postinst makes), each with its
# mode, for that user in place of floodgate.
while read -r type path mode owner grp _; do
    [[ $type == d ]] || continue
    [[ $owner == floodgate && $grp == floodgate ]] || { echo "tmpfiles: $path is not floodgate's"; fail=1; }
    install -d -m "$mode" "$root$path"
    if [[ $(id -u) -eq 0 ]]; then chown "$user:$group" "$root$path"; fi
done < <(grep -v '^#' "$root/usr/lib/tmpfiles.d/floodgate.conf")
state=$root/var/lib/floodgate runtime=$root/run/floodgate
[[ -d $state/hold && $(stat -c %a "$state/hold") == 700 ]] ||
    { echo "tmpfiles.d makes no private hold spool"; fail=1; }
# The installed config with the system's paths under the scratch root, listeners on free
# ports, the audit log on; readable by the service's group, as postinst leaves it.
config=$root/etc/floodgate/floodgate.toml
sed -i -e "s#\"/var/lib/floodgate/#\"$state/#; s#\"/run/floodgate/#\"$runtime/#" \
    -e "s#\"/etc/floodgate/tls/#\"$root/etc/floodgate/tls/#" \
    -e "s|^# audit = \"$state/audit.jsonl\"|audit = \"$state/audit.jsonl\"|" \
    -e 's#^address = "127\.0\.0\.1:2[0-9]*"#address = "127.0.0.1:0"#' "$config"
chgrp "$group" "$config"
chmod 0640 "$config"
[[ $(grep -v '^#' "$config" | grep -c "$root") == 7 ]] ||
    { echo "expected 7 paths moved into the scratch root:"; grep -n "$root" "$config"; fail=1; }

# Without the certificate postinst makes, check names it (and its line and column).
if "${as_user[@]}" "$root/usr/bin/floodgate" check --config "$config" >"$root/check.out" 2>&1; then
    echo "floodgate check passed without a certificate"
    fail=1
fi
grep -q "floodgate.toml:[0-9]*:[0-9]*: \[tls\] certificate $root/etc/floodgate/tls/floodgate.crt: no such file" "$root/check.out" ||
    { cat "$root/check.out"; echo "check did not name the missing certificate"; fail=1; }

step "make-certificate, as postinst runs it"
"$root/usr/share/floodgate/make-certificate" "$root/etc/floodgate/tls/floodgate.crt" \
    "$root/etc/floodgate/tls/floodgate.key" "$group" floodgate.test
# A second run leaves the certificate as it is.
before=$(sha256sum "$root/etc/floodgate/tls/floodgate.crt")
"$root/usr/share/floodgate/make-certificate" "$root/etc/floodgate/tls/floodgate.crt" \
    "$root/etc/floodgate/tls/floodgate.key" "$group" >/dev/null
[[ $before == "$(sha256sum "$root/etc/floodgate/tls/floodgate.crt")" ]] ||
    { echo "make-certificate replaced an existing certificate"; fail=1; }
[[ $(stat -c %a "$root/etc/floodgate/tls/floodgate.key") == 640 ]] ||
    { echo "the key is not mode 0640"; fail=1; }

# Every file and directory of the state and runtime directories: path, owner, mode.
tree() { find "$state" "$runtime" -printf '%p %u %m\n' | sort; }
if [[ $(id -u) -eq 0 ]]; then
    step "floodgate check as root: checks as $user, creates and changes nothing"
    tree >"$root/tree.before"
    if "$root/usr/bin/floodgate" check --config "$config" >"$root/check.out" 2>&1; then
        grep '^checked as:' "$root/check.out"
        grep -q "^checked as: $user (uid $(id -u "$user")), owner of $state" "$root/check.out" ||
            { cat "$root/check.out"; echo "root's check did not check as $user"; fail=1; }
    else
        cat "$root/check.out"
        echo "floodgate check by root failed on the installed config"
        fail=1
    fi
    tree >"$root/tree.after"
    diff "$root/tree.before" "$root/tree.after" ||
        { echo "root's check created or changed files (above)"; fail=1; }
fi

step "floodgate check as $user"
if "${as_user[@]}" "$root/usr/bin/floodgate" check --config "$config" >"$root/check.out" 2>&1; then
    grep -E '^(store|report|admin):' "$root/check.out"
else
    cat "$root/check.out"
    echo "floodgate check failed on the installed config"
    fail=1
fi

if [[ $(id -u) -ne 0 ]]; then
    # The init script, runuser and logrotate's su need root: checked by CI, which is root.
    if ((fail)); then echo "package check FAILED"; exit 1; fi
    echo "package check passed (the init script, admin verbs as root and logrotate need root): $deb"
    exit 0
fi

step "started by the init script (no systemd), one message relayed"
# A smart host that takes one message (it exits by itself within 60 s).
python3 .ci/smtp-once.py upstream "$root/upstream.port" &
upstream_pid=$!
for _ in $(seq 100); do [[ -s $root/upstream.port ]] && break; sleep 0.1; done
sed -i "s#^address = \"127\.0\.0\.1:10025\"#address = \"127.0.0.1:$(cat "$root/upstream.port")\"#" "$config"
mkdir -p "$root/etc/default" "$root/var/log"
cat >"$root/etc/default/floodgate" <<DEFAULTS
DAEMON=$root/usr/bin/floodgate
CONFIG=$config
RUNDIR=$runtime
LOGFILE=$root/var/log/floodgate.log
SERVICE_USER=$user
DEFAULTS
init() { FLOODGATE_DEFAULTS=$root/etc/default/floodgate "$root/usr/share/floodgate/floodgate.init" "$@"; }
init start || { echo "the init script did not start floodgate"; fail=1; }
run_pid=$(cat "$runtime/floodgate.pid" 2>/dev/null || true)
# Up when it prints the relay listener's line (at most 20 s).
for _ in $(seq 200); do
    if grep -q "^listening relay " "$root/var/log/floodgate.log" 2>/dev/null; then break; fi
    sleep 0.1
done
cat "$root/var/log/floodgate.log"
init status || fail=1
[[ $(stat -c %U "/proc/$run_pid") == "$user" ]] || { echo "floodgate does not run as $user"; fail=1; }
relay=$(awk '$1 == "listening" && $2 == "relay" {print $3}' "$root/var/log/floodgate.log")
python3 .ci/smtp-once.py send "${relay##*:}" || { echo "the message was not relayed"; fail=1; }
kill "$upstream_pid" 2>/dev/null || true
[[ -S $runtime/admin.sock ]] || { echo "no admin socket at $runtime/admin.sock"; fail=1; }

step "admin verbs by root: as sudo, as runuser to $user; the audit names the person"
verb() { "$@" --config "$config" || { echo "admin verb failed: $*"; fail=1; }; }
verb env SUDO_USER=alice "$root/usr/bin/floodgate" restrict by-sudo --for 10m --reason "package check"
verb env SUDO_USER=alice runuser -u "$user" -- "$root/usr/bin/floodgate" restrict by-runuser --for 10m --reason "package check"
verb "$root/usr/bin/floodgate" restricted
who() { python3 -c 'import json,sys
for l in open(sys.argv[1]):
    v = json.loads(l)
    if v["target"] == sys.argv[2]: print(v["who"])' "$state/audit.jsonl" "$1"; }
[[ $(who by-sudo) == "user:alice (uid 0 via sudo)" ]] ||
    { cat "$state/audit.jsonl"; echo "the audit does not name alice behind sudo"; fail=1; }
[[ $(who by-runuser) == "user:alice (uid $(id -u "$user") via sudo)" ]] ||
    { cat "$state/audit.jsonl"; echo "the audit does not name alice behind runuser"; fail=1; }

step "logrotate with the package's file: new lines go to new files"
# The package's logrotate file with the scratch root's paths and user.
sed -e "s#/var/lib/floodgate/#$state/#g; s#/run/floodgate/#$runtime/#g" \
    -e "s#/var/log/floodgate.log#$root/var/log/floodgate.log#" \
    -e "s#^    su floodgate floodgate#    su $user $group#" \
    "$root/etc/logrotate.d/floodgate" >"$root/logrotate.conf"
logrotate -f -s "$root/logrotate.status" "$root/logrotate.conf" ||
    { echo "logrotate failed"; fail=1; }
[[ -f $state/events.jsonl.1 && -f $state/audit.jsonl.1 ]] ||
    { ls -l "$state"; echo "logrotate did not rotate the event and audit logs"; fail=1; }
# SIGUSR1 makes floodgate open the path anew (within a second, by itself).
for _ in $(seq 100); do [[ -e $state/events.jsonl ]] && break; sleep 0.1; done
verb env SUDO_USER=alice "$root/usr/bin/floodgate" restrict after-rotation --for 10m --reason "package check"
for _ in $(seq 100); do
    grep -q '"key":"after-rotation"' "$state/events.jsonl" 2>/dev/null && break
    sleep 0.1
done
# Without SIGUSR1 (from logrotate's postrotate) it would go to events.jsonl.1.
grep -q '"key":"after-rotation"' "$state/events.jsonl" ||
    { echo "the event after rotation is not in the new event log"; fail=1; }
grep -q 'after-rotation' "$state/audit.jsonl" ||
    { echo "the action after rotation is not in the new audit log"; fail=1; }
grep -q 'by-sudo' "$state/audit.jsonl" && { echo "the new audit log holds old lines"; fail=1; }
# floodgate's own log, copied to floodgate.log.1 and truncated by the same file (a line
# written between the copy and the truncation is lost: copytruncate's window, so the
# SIGUSR1 log line is not looked for; the new event log holding the new event shows it).
[[ -f $root/var/log/floodgate.log.1 ]] || { echo "logrotate did not rotate floodgate.log"; fail=1; }
runlog() { cat "$root/var/log/floodgate.log.1" "$root/var/log/floodgate.log" 2>/dev/null; }

step "reload and stop by the init script"
init reload || fail=1
for _ in $(seq 100); do
    grep -q "SIGHUP: configuration reloaded" "$root/var/log/floodgate.log" && break
    sleep 0.1
done
grep -q "SIGHUP: configuration reloaded" "$root/var/log/floodgate.log" ||
    { echo "init reload did not reload"; fail=1; }
init stop || { echo "the init script did not stop floodgate"; fail=1; }
# Gone, or a zombie its new parent (this machine's pid 1) has not reaped yet.
if [[ -d /proc/$run_pid ]] && ! grep -q '^State:.*zombie' "/proc/$run_pid/status" 2>/dev/null; then
    echo "floodgate did not stop"
    fail=1
fi
run_pid=""
[[ -f $state/state ]] || { echo "no state snapshot at $state/state"; fail=1; }
grep -q '"limit":"ip-recipients"' "$state/events.jsonl.1" ||
    { echo "no ip-recipients event in $state/events.jsonl.1"; fail=1; }
for f in "$state/state" "$state/events.jsonl" "$state/audit.jsonl"; do
    [[ ! -e $f || $(stat -c %U "$f") == "$user" ]] || { echo "$f is not $user's"; fail=1; }
done
if runlog | grep -q "denied\|ERROR"; then
    echo "floodgate run could not use a path or failed (above)"
    fail=1
fi
ls -l "$state" "$runtime"

step "postrm purge"
sed -e "s#/var/lib/floodgate#$state#g; s#/run/floodgate#$runtime#g" \
    -e "s#/etc/floodgate/#$root/etc/floodgate/#g" \
    "$root/DEBIAN/postrm" >"$root/postrm"
sh "$root/postrm" purge || { echo "postrm purge failed"; fail=1; }
for gone in "$state" "$runtime" "$root/etc/floodgate/tls"; do
    [[ ! -e $gone ]] || { echo "purge left $gone"; fail=1; }
done
[[ -f $config ]] || { echo "postrm removed the config (dpkg removes conffiles)"; fail=1; }

if ((fail)); then
    echo "package check FAILED"
    exit 1
fi
echo "package check passed: $deb"
