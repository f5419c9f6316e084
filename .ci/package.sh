#!/usr/bin/env bash
# Builds floodgate's .deb from the dev-profile binary the tests already built (no second,
# release build), unpacks it into a scratch root and checks it: the files are there, the
# man pages and completions cover every subcommand, the maintainer scripts are valid shell,
# /etc/floodgate/floodgate.toml is a conffile, and `floodgate check` passes on the
# installed config with the installed binary.
#
#   bash .ci/package.sh            (from the repository root; needs cargo-deb, dpkg)
set -euo pipefail

cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}

step() { printf -- '-- %s\n' "$*"; }

bin=$target/debug/floodgate
if [[ -x $bin && ${FLOODGATE_PACKAGE_BUILD:-0} != 1 ]]; then
    # The binary `cargo test` built: a `cargo build` here would rebuild dependencies with
    # other features for nothing. FLOODGATE_PACKAGE_BUILD=1 builds anyway.
    step "using the dev-profile binary the tests built: $bin"
else
    step "build (dev profile)"
    cargo build --bin floodgate
fi

step "man pages and completions into target/deb-docs"
rm -rf target/deb-docs
"$bin" generate-docs target/deb-docs

step "cargo deb --no-build --profile dev"
rm -rf target/debian
deb=$(cargo deb --no-build --profile dev --fast --output target/debian/ 2>&1 | tail -1)
[[ -f $deb ]] || { echo "cargo deb did not print the package path: $deb"; exit 1; }
ls -l "$deb"
dpkg-deb --info "$deb" | sed -n '1,40p'

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
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
    usr/share/floodgate/prometheus/floodgate-rules.yml usr/share/floodgate/grafana/floodgate.json \
    usr/share/bash-completion/completions/floodgate usr/share/zsh/vendor-completions/_floodgate \
    usr/share/fish/vendor_completions.d/floodgate.fish usr/share/doc/floodgate/README.md; do
    need "$f"
done
[[ -x $root/usr/bin/floodgate ]] || { echo "/usr/bin/floodgate is not executable"; fail=1; }
grep -qx /etc/floodgate/floodgate.toml "$root/DEBIAN/conffiles" ||
    { echo "/etc/floodgate/floodgate.toml is not a conffile"; fail=1; }
for s in postinst postrm; do
    [[ -x $root/DEBIAN/$s ]] || { echo "no executable $s"; fail=1; }
    sh -n "$root/DEBIAN/$s" || fail=1
done

# Every visible subcommand (from the installed binary's help) has its man page and is in
# the bash completion.
subs=$("$root/usr/bin/floodgate" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR>1 && $1 != "help" {print $1}')
[[ -n $subs ]] || { echo "no subcommands in floodgate --help"; fail=1; }
need usr/share/man/man1/floodgate.1.gz
for s in $subs; do
    if [[ ! -e $root/usr/share/man/man1/floodgate-$s.1.gz && ! -e $root/usr/share/man/man1/floodgate-$s.1 ]]; then
        echo "no man page for floodgate $s"
        fail=1
    fi
    grep -qw -- "$s" "$root/usr/share/bash-completion/completions/floodgate" ||
        { echo "bash completion lacks $s"; fail=1; }
done
echo "subcommands with man pages and completions: $(echo $subs | wc -w)"

step "floodgate check on the installed config"
# The shipped config names the repository's development certificate (../certs/dev from
# /etc/floodgate); an operator replaces it with the host's own. Put it where the installed
# config looks, as that operator step, and check everything else as installed.
tls_dir=$root/etc/certs/dev
mkdir -p "$tls_dir"
cp certs/dev/server.crt certs/dev/server.key "$tls_dir/"
"$root/usr/bin/floodgate" check --config "$root/etc/floodgate/floodgate.toml" >"$root/check.out" 2>&1 ||
    { cat "$root/check.out"; echo "floodgate check failed on the installed config"; fail=1; }
tail -3 "$root/check.out"

if ((fail)); then
    echo "package check FAILED"
    exit 1
fi
echo "package check passed: $deb"
