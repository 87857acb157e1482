#!/usr/bin/env bash
# Runs a command with the block device under DIR set to other readahead limits, and puts the
# device's own values back afterwards (also when the command fails or is interrupted).
#
#   scripts/with-device-limits.sh DIR READ_AHEAD_KB MAX_SECTORS_KB -- COMMAND [ARGS...]
#
# For cold-read benchmarks on limits other than this machine's: Linux reads at most the larger
# of `read_ahead_kb` and `max_sectors_kb` for one MADV_WILLNEED (bench/README.md, "Cold reads
# on common device limits"); 128 and 128 are common defaults, this machine's disk has 8192 and
# 4096. Needs root (it writes /sys/block/*/queue). Changes the whole device for as long as the
# command runs: run nothing else on it meanwhile.
set -euo pipefail

if [ $# -lt 5 ] || [ "$4" != "--" ]; then
    echo "usage: $0 DIR READ_AHEAD_KB MAX_SECTORS_KB -- COMMAND [ARGS...]" >&2
    exit 2
fi
dir=$1 read_ahead=$2 max_sectors=$3
shift 4

source=$(findmnt -no SOURCE --target "$dir")
disk=$(lsblk -no PKNAME "$source" 2>/dev/null | head -1)
[ -n "$disk" ] || disk=$(basename "$source")
queue=/sys/block/$disk/queue
if [ ! -w "$queue/read_ahead_kb" ] || [ ! -w "$queue/max_sectors_kb" ]; then
    echo "$0: cannot change $queue (not root, or $source is not a block device)" >&2
    exit 1
fi

own_read_ahead=$(cat "$queue/read_ahead_kb")
own_max_sectors=$(cat "$queue/max_sectors_kb")
# The request size first: changing it makes the kernel set the readahead window anew.
restore() {
    echo "$own_max_sectors" > "$queue/max_sectors_kb"
    echo "$own_read_ahead" > "$queue/read_ahead_kb"
}
trap restore EXIT
echo "$max_sectors" > "$queue/max_sectors_kb"
echo "$read_ahead" > "$queue/read_ahead_kb"
echo "$0: $disk at read_ahead_kb $(cat "$queue/read_ahead_kb"), max_sectors_kb $(cat "$queue/max_sectors_kb") (its own: $own_read_ahead, $own_max_sectors)" >&2
"$@"
