#!/bin/sh
# deps.sh: makes sure the Debian packages mixscope builds and tests with are installed.
# Checks with dpkg; when something is missing it runs apt-get install for exactly that list if we
# are root, and otherwise prints the apt-get line and stops (exit 1).
PKGS="build-essential pkg-config clang libcjson-dev libpcre2-dev libcairo2-dev fonts-dejavu-core libsdl2-dev libncurses-dev libreadline-dev \
libstb-dev libcmocka-dev xvfb x11-apps tmux"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq $missing >/dev/null || {
        echo "deps: apt-get install failed for:$missing" >&2; exit 1; }
else
    echo "deps: missing Debian packages; run as root:" >&2
    echo "    apt-get install -y$missing" >&2
    exit 1
fi
