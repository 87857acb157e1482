#!/usr/bin/env bash
# Runs a command with the block device under DIR set to other readahead limits, and puts the
# device's own values back afterwards (also when the command fails, or the script is
# interrupted or terminated: the command is stopped first).
#
#   scripts/with-device-limits.sh DIR READ_AHEAD_KB MAX_SECTORS_KB -- COMMAND [ARGS...]
#
# For cold-read benchmarks on limits other than this machine's: Linux reads at most the larger
# of `read_ahead_kb` and `max_sectors_kb` for one MADV_WILLNEED (bench/README.md, "Cold reads
# on common device limits"); 128 and 128 are common defaults, this machine's disk has 8192 and
# 4096. Needs root (it writes /sys/dev/block/*/queue). Changes the whole device for as long as
# the command runs: run nothing else on it meanwhile.
#
# The device is the one whose number the file system under DIR reports (a partition's disk for
# a partition; a device-mapper or md device as itself). A file system with no block device of
# its own (btrfs, overlay, tmpfs, NFS) is refused: its reads do not follow these limits.
set -euo pipefail

if [ $# -lt 5 ] || [ "$4" != "--" ]; then
    echo "usage: $0 DIR READ_AHEAD_KB MAX_SECTORS_KB -- COMMAND [ARGS...]" >&2
    exit 2
fi
dir=$1 read_ahead=$2 max_sectors=$3
shift 4

# findmnt, not stat's %Hd:%Ld (coreutils 9 and later only).
device=$(findmnt -no MAJ:MIN --target "$dir" | head -1 | tr -d ' ')
sys=/sys/dev/block/$device
if [ ! -e "$sys" ]; then
    echo "$0: $dir is on device $device, which is not a block device (btrfs, overlay, tmpfs, a network file system?): its reads do not follow a device's limits" >&2
    exit 1
fi
sys=$(readlink -f "$sys")
if [ -e "$sys/partition" ]; then
    sys=$(dirname "$sys")
fi
queue=$sys/queue
if [ ! -w "$queue/read_ahead_kb" ] || [ ! -w "$queue/max_sectors_kb" ]; then
    echo "$0: cannot change $queue/read_ahead_kb and max_sectors_kb (root is needed)" >&2
    exit 1
fi

own_read_ahead=$(cat "$queue/read_ahead_kb")
own_max_sectors=$(cat "$queue/max_sectors_kb")
restore() {
    set +e
    # The request size first: changing it makes the kernel set the readahead window anew.
    echo "$own_max_sectors" > "$queue/max_sectors_kb" || echo "$0: could not put $queue/max_sectors_kb back to $own_max_sectors" >&2
    echo "$own_read_ahead" > "$queue/read_ahead_kb" || echo "$0: could not put $queue/read_ahead_kb back to $own_read_ahead" >&2
}
trap restore EXIT
echo "$max_sectors" > "$queue/max_sectors_kb"
echo "$read_ahead" > "$queue/read_ahead_kb"
echo "$0: $(basename "$sys") at read_ahead_kb $(cat "$queue/read_ahead_kb"), max_sectors_kb $(cat "$queue/max_sectors_kb") (its own: $own_read_ahead, $own_max_sectors)" >&2

# In the background and in a process group of its own (`set -m`), so that a signal to this
# script reaches the command and every process it started before the limits go back (bash
# runs a trap only once its foreground child has ended). A second signal kills the group.
set -m
"$@" &
child=$!
signals=0
stop() {
    signals=$((signals + 1))
    if [ "$signals" -eq 1 ]; then
        kill -TERM -- "-$child" 2>/dev/null
    else
        kill -KILL -- "-$child" 2>/dev/null
    fi
}
trap stop INT TERM HUP
# A signal ends `wait` early (status above 128): wait again until the command has ended.
while true; do
    if wait "$child"; then
        status=0
    else
        status=$?
    fi
    kill -0 "$child" 2>/dev/null || break
done
exit "$status"
