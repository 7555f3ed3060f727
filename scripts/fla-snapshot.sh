#!/bin/sh
# fla-snapshot.sh REPO [COMMIT]: makes .fla, the pinned flash-linear-attention snapshot that
# make bench-gpu's peers (bench/gpu/peers.py) and tools/train_peer.py import: `git archive` of
# REPO's fla/ package at COMMIT, plus .fla/COMMIT naming it. REPO is a clone (or bare mirror) of
# github:fla-org/flash-linear-attention; COMMIT defaults to the one every run in
# docs/gpu-results.md measured. .fla is ignored by git: it travels to the GPU machine beside the
# tree (the device tool's carry), never into the repository.
set -e
PIN=bc3b101dcb713ddc5bd8924b66754eb68b5ccf89
repo=${1:?usage: sh scripts/fla-snapshot.sh REPO [COMMIT]}
commit=${2:-$PIN}
cd "$(dirname "$0")/.."
git -C "$repo" rev-parse --git-dir >/dev/null 2>&1 || {
    echo "fla-snapshot: $repo is not a git repository" >&2
    exit 1
}
full=$(git -C "$repo" rev-parse --verify --quiet "$commit^{commit}") || {
    echo "fla-snapshot: $repo has no commit $commit" >&2
    exit 1
}
tmp=$(mktemp -d .fla.tmp.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
git -C "$repo" archive "$full" fla | tar xf - -C "$tmp"
[ -f "$tmp/fla/__init__.py" ] || {
    echo "fla-snapshot: $commit has no fla/ package" >&2
    exit 1
}
echo "$full" >"$tmp/COMMIT"
rm -rf .fla
mv "$tmp" .fla
trap - EXIT
echo "fla-snapshot: .fla at $full ($(du -sh .fla | cut -f1))"
