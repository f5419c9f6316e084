#!/usr/bin/env bash
# Unpack Debian's Exim 4 (exim4-daemon-heavy) into $EXIM_DIR (default /opt/exim4) for
# the tests that run floodgate in front of a real Exim (tests/smarthost/smarthost_exim.rs).
# Idempotent: does nothing but check `exim -bV` when the binary is already there.
#
# Why unpack instead of `apt-get install exim4-daemon-heavy`: every Debian MTA package
# Conflicts with every other one (they all Provide mail-transport-agent), and postfix is
# installed for the Postfix tests; installing exim would remove it. `dpkg-deb -x`
# installs no package and starts no daemon.
#
# Why -heavy: exim4-daemon-light is built without SUPPORT_PROXY (no `hosts_proxy`).
#
# What the unpacked binary still needs from the system:
#   * its shared libraries: the ones `ldd` reports missing are installed with apt-get
#     (plain library packages; the install is simulated first and refused if it would
#     remove any package);
#   * the user and group Debian-exim: the binary is built with EXIM_USER=ref:Debian-exim
#     and looks the name up before reading any configuration (as exim4-base's postinst
#     does, a system user without a home or login is created).
# exim4-base and exim4-config are not needed: the tests run the binary with their own
# configuration (-C), spool and log directories, and set exim_path to the unpacked binary.
#
# Prints the binary's path and version. Exit status 0 only when `exim -bV` runs.
set -euo pipefail

EXIM_DIR="${EXIM_DIR:-/opt/exim4}"
EXIM_BIN="$EXIM_DIR/usr/sbin/exim4"
export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    SUDO="sudo"
fi

updated=""
apt_update() {
    if [[ -z "$updated" ]]; then
        $SUDO apt-get update -q </dev/null
        updated=1
    fi
}

if [[ ! -x "$EXIM_BIN" ]]; then
    echo "install-exim.sh: unpacking exim4-daemon-heavy into $EXIM_DIR"
    apt_update
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # apt-get download as root runs as the _apt user unless told otherwise; the
    # directory must be writable by whoever downloads.
    chmod 1777 "$tmp"
    (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root exim4-daemon-heavy </dev/null)
    deb=$(ls "$tmp"/exim4-daemon-heavy_*.deb)
    $SUDO mkdir -p "$EXIM_DIR"
    $SUDO dpkg-deb -x "$deb" "$EXIM_DIR"
    basename "$deb" .deb | sed 's/^exim4-daemon-heavy_//; s/_[a-z0-9]*$//' |
        $SUDO tee "$EXIM_DIR/VERSION" >/dev/null
fi

# Libraries the binary links against that this machine lacks, as Debian packages.
missing_libs=$(ldd "$EXIM_BIN" | awk '/=> not found/ {print $1}')
if [[ -n "$missing_libs" ]]; then
    apt_update
    # The library packages among exim4-daemon-heavy's own dependencies that are not
    # installed (apt-file is not assumed; the package names its libraries itself).
    pkgs=()
    for pkg in $(apt-cache depends exim4-daemon-heavy | awk '$1 == "Depends:" && $2 ~ /^lib/ {print $2}'); do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
            pkgs+=("$pkg")
        fi
    done
    if ((${#pkgs[@]} == 0)); then
        echo "install-exim.sh: $EXIM_BIN lacks $(echo $missing_libs) but every library package it depends on is installed" >&2
        exit 1
    fi
    echo "install-exim.sh: installing libraries ${pkgs[*]} (for $(echo $missing_libs))"
    removals=$(apt-get install -s --no-install-recommends "${pkgs[@]}" </dev/null | grep '^Remv' || true)
    if [[ -n "$removals" ]]; then
        echo "install-exim.sh: refusing: installing ${pkgs[*]} would remove packages:" >&2
        echo "$removals" >&2
        exit 1
    fi
    $SUDO apt-get install -y -q --no-install-recommends "${pkgs[@]}" </dev/null
    still=$(ldd "$EXIM_BIN" | awk '/=> not found/ {print $1}')
    if [[ -n "$still" ]]; then
        echo "install-exim.sh: still missing after install: $still" >&2
        exit 1
    fi
fi

if ! getent passwd Debian-exim >/dev/null; then
    echo "install-exim.sh: creating system user Debian-exim"
    $SUDO useradd --system --user-group --no-create-home --home-dir /var/spool/exim4 \
        --shell /usr/sbin/nologin Debian-exim
fi

# -bV with a one-line private configuration: the compiled-in configuration files
# (/etc/exim4/...) do not exist without exim4-config.
conf=$(mktemp)
echo "keep_environment =" >"$conf"
if ! version=$($SUDO "$EXIM_BIN" -C "$conf" -bV 2>&1); then
    rm -f "$conf"
    echo "install-exim.sh: $EXIM_BIN -bV failed:" >&2
    echo "$version" >&2
    exit 1
fi
rm -f "$conf"
if ! grep -q 'PROXY' <<<"$version"; then
    echo "install-exim.sh: $EXIM_BIN has no PROXY support:" >&2
    echo "$version" >&2
    exit 1
fi
echo "install-exim.sh: $(head -n1 <<<"$version") ($(cat "$EXIM_DIR/VERSION" 2>/dev/null || echo unknown)) at $EXIM_BIN"
