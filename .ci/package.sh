#!/usr/bin/env bash
# Builds floodgate's .deb from a release build, unpacks it into a scratch root and checks it
# as installed:
#   - the files are there (the README and every page of the book), the man pages (with
#     floodgate.toml(5)) and completions cover every subcommand, the
#     maintainer scripts are valid shell, /etc/floodgate/floodgate.toml is a conffile;
#   - the binary is a release build (`floodgate --version` says so: no debug assertions);
#   - the installed config, its system paths moved into the scratch root and its listeners
#     onto free ports, run by an unprivileged user (nobody when this runs as root) with the
#     directories the unit and tmpfiles.d make: `floodgate check` names the missing
#     certificate, the package's make-certificate makes one, `check` then passes, and
#     `floodgate run` writes its admin socket, event log and state snapshot where the unit
#     says, answers an admin verb, and stops on SIGTERM.
#
#   bash .ci/package.sh            (from the repository root; needs cargo-deb, dpkg, openssl,
#                                  and setpriv when run as root)
set -euo pipefail

cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}

step() { printf -- '-- %s\n' "$*"; }

step "build (release profile)"
start=$(date +%s)
cargo build --release --bin floodgate
echo "release build: $(($(date +%s) - start)) s"
bin=$target/release/floodgate

step "man pages and completions into target/deb-docs"
rm -rf target/deb-docs
"$bin" generate-docs target/deb-docs

step "cargo deb --no-build"
rm -rf target/debian
deb=$(cargo deb --no-build --output target/debian/ 2>&1 | tail -1)
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
    usr/share/floodgate/make-certificate \
    usr/share/floodgate/prometheus/floodgate-rules.yml usr/share/floodgate/grafana/floodgate.json \
    usr/share/bash-completion/completions/floodgate usr/share/zsh/vendor-completions/_floodgate \
    usr/share/fish/vendor_completions.d/floodgate.fish usr/share/doc/floodgate/README.md \
    usr/share/doc/floodgate/docs/SUMMARY.md; do
    need "$f"
done
[[ -x $root/usr/bin/floodgate ]] || { echo "/usr/bin/floodgate is not executable"; fail=1; }
[[ -x $root/usr/share/floodgate/make-certificate ]] ||
    { echo "/usr/share/floodgate/make-certificate is not executable"; fail=1; }
grep -qx /etc/floodgate/floodgate.toml "$root/DEBIAN/conffiles" ||
    { echo "/etc/floodgate/floodgate.toml is not a conffile"; fail=1; }
for s in postinst postrm; do
    [[ -x $root/DEBIAN/$s ]] || { echo "no executable $s"; fail=1; }
    sh -n "$root/DEBIAN/$s" || fail=1
done
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

step "the installed config, run as an unprivileged user"
# The user the service would run as: nobody (with its own group) when this runs as root,
# else this user. "${as_user[@]}" CMD runs CMD as that user (setpriv execs CMD: a process
# started in the background is floodgate itself, for its signals).
if [[ $(id -u) -eq 0 ]]; then
    user=nobody
    group=$(id -gn nobody)
    as_user=(setpriv --reuid="$user" --regid="$group" --clear-groups --)
else
    user=$(id -un)
    group=$(id -gn)
    as_user=()
fi
chmod 0755 "$root"
# What tmpfiles.d (and the unit's StateDirectory=/RuntimeDirectory=) make, for that user.
state=$root/var/lib/floodgate runtime=$root/run/floodgate
install -d -m 0750 "$state" "$runtime"
chown "$user:$group" "$state" "$runtime"
# The installed config with the system's paths under the scratch root, listeners on free
# ports; readable by the service's group, as postinst leaves it.
config=$root/etc/floodgate/floodgate.toml
sed -i -e "s#\"/var/lib/floodgate/#\"$state/#; s#\"/run/floodgate/#\"$runtime/#" \
    -e "s#\"/etc/floodgate/tls/#\"$root/etc/floodgate/tls/#" \
    -e 's#^address = "127\.0\.0\.1:2[0-9]*"#address = "127.0.0.1:0"#' "$config"
chgrp "$group" "$config"
chmod 0640 "$config"
[[ $(grep -v '^#' "$config" | grep -c "$root") == 6 ]] ||
    { echo "expected 6 paths moved into the scratch root:"; grep -n "$root" "$config"; fail=1; }

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

step "floodgate check as $user"
if "${as_user[@]}" "$root/usr/bin/floodgate" check --config "$config" >"$root/check.out" 2>&1; then
    grep -E '^(store|report|admin):' "$root/check.out"
else
    cat "$root/check.out"
    echo "floodgate check failed on the installed config"
    fail=1
fi

step "floodgate run as $user, one message relayed"
# A smart host that takes one message (it exits by itself within 60 s).
python3 .ci/smtp-once.py upstream "$root/upstream.port" &
upstream_pid=$!
for _ in $(seq 100); do [[ -s $root/upstream.port ]] && break; sleep 0.1; done
sed -i "s#^address = \"127\.0\.0\.1:10025\"#address = \"127.0.0.1:$(cat "$root/upstream.port")\"#" "$config"
"${as_user[@]}" "$root/usr/bin/floodgate" run --config "$config" >"$root/run.out" 2>"$root/run.err" &
run_pid=$!
# Up when it prints the relay listener's line (at most 20 s).
for _ in $(seq 200); do
    if grep -q "^listening relay " "$root/run.out" 2>/dev/null || ! kill -0 "$run_pid" 2>/dev/null; then break; fi
    sleep 0.1
done
cat "$root/run.out"
relay=$(awk '$1 == "listening" && $2 == "relay" {print $3}' "$root/run.out")
python3 .ci/smtp-once.py send "${relay##*:}" || { echo "the message was not relayed"; fail=1; }
kill "$upstream_pid" 2>/dev/null || true
[[ -S $runtime/admin.sock ]] || { echo "no admin socket at $runtime/admin.sock"; fail=1; }
"${as_user[@]}" "$root/usr/bin/floodgate" restricted --config "$config" ||
    { echo "the admin verb could not reach floodgate"; fail=1; }
kill -TERM "$run_pid" 2>/dev/null || true
# Stopped within 20 s.
for _ in $(seq 200); do
    kill -0 "$run_pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$run_pid" 2>/dev/null; then
    echo "floodgate did not stop on SIGTERM"
    fail=1
fi
wait "$run_pid" || { echo "floodgate run exited with status $?"; fail=1; }
run_pid=""
[[ -f $state/state ]] || { echo "no state snapshot at $state/state"; fail=1; }
grep -q '"limit":"ip-recipients"' "$state/events.jsonl" ||
    { echo "no ip-recipients event in $state/events.jsonl"; fail=1; }
# The hold spool, made by floodgate itself: private to the service's user.
[[ -d $state/hold && $(stat -c %a "$state/hold") == 700 && $(stat -c %U "$state/hold") == "$user" ]] ||
    { echo "no hold spool $state/hold of mode 0700 owned by $user"; fail=1; }
for f in "$state/state" "$state/events.jsonl"; do
    [[ ! -e $f || $(stat -c %U "$f") == "$user" ]] || { echo "$f is not $user's"; fail=1; }
done
cat "$root/run.err"
if grep -q "denied\|ERROR" "$root/run.err"; then
    echo "floodgate run could not use a path or failed (above)"
    fail=1
fi
ls -l "$state" "$runtime"

if ((fail)); then
    echo "package check FAILED"
    exit 1
fi
echo "package check passed: $deb"
