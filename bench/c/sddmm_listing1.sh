#!/usr/bin/env bash
# Paper 003's Listing 1 by hand (sddmm_listing1.c): TACO's SDDMM against
# ReACT's at the same loop orders, NK = 16, 32, 64, on every shared matrix.
# Usage: bench/c/sddmm_listing1.sh [DATA_DIR]  (default ../shared/data)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="${1:-$here/../../../shared/data}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for nk in 16 32 64; do
    "${CC:-cc}" -O3 -march=native -std=c11 -DNK="$nk" "$here/sddmm_listing1.c" -o "$out/sddmm$nk"
done
for m in "$data"/matrices/*.mtx; do
    for nk in 16 32 64; do
        "$out/sddmm$nk" "$m"
    done
done
