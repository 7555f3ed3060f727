#!/bin/sh
# gpu-prepare.sh: run here (the development machine) before sending the tree to a GPU machine that
# has CUDA but none of our Debian packages and no network: downloads the cJSON (and cmocka)
# packages into .devdeps/ and copies the reference data into .refs/ (both ignored by git; carry
# them with the run). scripts/gpu-run.sh is the command to run there.
set -e
cd "$(dirname "$0")/.."
mkdir -p .devdeps .refs
(cd .devdeps && apt-get download libcjson-dev libcjson1 libcmocka-dev libcmocka0 >/dev/null 2>&1)
cp -r ../shared/refs/. .refs/
grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >>.git/info/exclude
grep -qx '/.refs/' .git/info/exclude 2>/dev/null || echo '/.refs/' >>.git/info/exclude
ls .devdeps
