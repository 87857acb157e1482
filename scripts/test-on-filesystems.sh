#!/usr/bin/env bash
# Runs lapilli-core's tests with their stores on XFS and on btrfs, not only on the ext4 (or
# tmpfs) that holds the checkout: the engine's choices depend on the file system (zeros written
# ahead on ext4 and XFS, not on copy-on-write btrfs; `posix_fallocate`; how `fdatasync` and
# page-cache eviction behave). Each file system is made in an 8 GiB sparse image in a directory
# of this run's own under target/, mounted through a loop device, used as TMPDIR (where the
# tests make their stores) and LAPILLI_TEST_DISK_DIR (the page-write test, which otherwise uses
# target/tmp), then unmounted and removed, also when a run fails. `core/tests/scale.rs` keeps
# its stores in /dev/shm wherever it runs (it measures costs, not a file system).
#
#   scripts/test-on-filesystems.sh [xfs] [btrfs]      (both when none is named)
#
# Needs root (mount, losetup) and installs xfsprogs and btrfs-progs with apt-get if their
# mkfs is missing. Takes about 3 to 4 minutes per file system on 2 cores after the first build.
# Not part of the test command: it changes the machine (mounts) and needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

filesystems=("$@")
[ ${#filesystems[@]} -gt 0 ] || filesystems=(xfs btrfs)
if [ "$(id -u)" != 0 ]; then
    echo "$0: needs root (loop mounts)" >&2
    exit 1
fi

mkdir -p target
work=$(mktemp -d "$(pwd)/target/filesystems.XXXXXX")
# Traversable by others: a test runs a follower as another user, which must reach its store.
chmod 755 "$work"
mounted=()
cleanup() {
    set +e
    local busy=0
    for dir in "${mounted[@]}"; do
        umount "$dir" || busy=1
    done
    # Never remove through a file system still mounted (a busy unmount): say what is left.
    if [ "$busy" = 0 ]; then
        rm -rf --one-file-system "$work"
    else
        echo "$0: could not unmount everything under $work; left as it is (umount, then rm -r it)" >&2
    fi
}
trap cleanup EXIT

for fs in "${filesystems[@]}"; do
    case $fs in
        xfs) package=xfsprogs ;;
        btrfs) package=btrfs-progs ;;
        *) echo "$0: unknown file system $fs (xfs or btrfs)" >&2; exit 2 ;;
    esac
    if ! command -v "mkfs.$fs" > /dev/null; then
        if ! command -v apt-get > /dev/null; then
            echo "$0: mkfs.$fs is missing and there is no apt-get to install $package" >&2
            exit 1
        fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package" > /dev/null \
            || { apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package" > /dev/null; }
    fi
    image=$work/$fs.img
    dir=$work/$fs
    truncate -s 8G "$image"
    "mkfs.$fs" -f "$image" > /dev/null
    mkdir -p "$dir"
    mount -o loop "$image" "$dir"
    mounted+=("$dir")
    chmod 1777 "$dir"
    echo "== lapilli-core tests with their stores on $fs ($(findmnt -no FSTYPE,SOURCE "$dir"))"
    TMPDIR=$dir LAPILLI_TEST_DISK_DIR=$dir cargo test -p lapilli-core --features fault-injection
done
echo "== passed on: ${filesystems[*]}"
