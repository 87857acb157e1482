#!/usr/bin/env bash
# The release build: every artifact a release needs, for every Linux machine we support, into
# dist/, then proves each one installs and runs. Not part of scripts/test.sh (a full run takes
# tens of minutes on 2 cores; README "Releases" has the figure); `--versions` is, as it is fast.
#
#   bash scripts/release.sh             install the tools, check versions, build everything, check it
#   bash scripts/release.sh --check     re-run every check on an existing dist/
#   bash scripts/release.sh --versions  only check that every package carries the workspace version
#
# Targets: x86_64/aarch64 x glibc/musl. glibc builds link against glibc 2.17 (zig's bundled libc
# stubs), so they run on RHEL 7/8, Ubuntu 20.04, Amazon Linux 2 and later; musl builds link
# musl's libc.so dynamically (a cdylib cannot link musl statically into a process that already
# has a libc). Each native library is built once per target with cargo-zigbuild (Node, JVM) or
# maturin --zig (Python, which drives the same zig), and packaged from there.
#
# Everything the script needs comes from the registries into target/release-tools/ (a venv with
# maturin, ziglang and auditwheel; cargo-zigbuild; rustup targets) and Debian (qemu-user, the
# aarch64 runtimes' packages unpacked into a private sysroot, never installed).
#
# dist/ layout:
#   dist/python/  lapilli-V-cp39-abi3-{manylinux_2_17,musllinux_1_2}_{x86_64,aarch64}.whl, lapilli-V.tar.gz
#   dist/node/    lapilli-V.tgz, lapilli-linux-{x64,arm64}-{gnu,musl}-V.tgz
#   dist/jvm/     lapilli-V.jar (+ -sources, -javadoc), lapilli-V.pom
#   dist/native/  the native libraries as built, one folder per target (input of the checks)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/target/release-tools
DIST=$ROOT/dist
MODE=${1:-build}
case "$MODE" in build | --check | --versions) ;; *)
    echo "usage: bash scripts/release.sh [--check | --versions]" >&2
    exit 2
    ;;
esac

# The four Linux targets, and each one's name in the Node and JVM package layouts.
TARGETS=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
node_platform() { # napi-rs names: linux-x64-gnu, linux-arm64-musl, ...
    local cpu=${1%%-*} libc=${1##*-}
    [ "$cpu" = x86_64 ] && cpu=x64 || cpu=arm64
    echo "linux-$cpu-$libc"
}
jvm_prefix() { # JNA's resource prefixes; JNA does not tell musl apart, so musl gets "-musl" (NativeLibrary.kt picks)
    local cpu=${1%%-*} libc=${1##*-}
    [ "$cpu" = x86_64 ] && cpu=x86-64
    [ "$libc" = musl ] && echo "linux-$cpu-musl" || echo "linux-$cpu"
}
# cargo-zigbuild's spelling of a target: glibc targets carry the glibc version to link against.
zig_target() { [ "${1##*-}" = gnu ] && echo "$1.2.17" || echo "$1"; }

# Pinned tools (a release is reproducible only with the same tools).
MATURIN=maturin==1.16.0
ZIGLANG=ziglang==0.17.1
AUDITWHEEL=auditwheel==6.8.2
CARGO_ZIGBUILD_VERSION=0.24.1
GLIBC_MAX=2.17

step() { echo; echo "== $*"; }
fail() { echo "release: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# Versions: one version, the workspace Cargo.toml's; every package must carry it.

workspace_version() {
    sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml
}

check_versions() {
    local want bad=0 got
    want=$(workspace_version)
    [ -n "$want" ] || fail "no version in [workspace.package] of Cargo.toml"
    for crate in core python node jvm; do
        grep -q '^version.workspace = true' "$crate/Cargo.toml" ||
            { echo "  $crate/Cargo.toml does not take version.workspace" >&2; bad=1; }
    done
    # maturin takes the wheel's version from python/Cargo.toml when pyproject declares it dynamic.
    if grep -q '^version *=' python/pyproject.toml; then
        got=$(sed -n 's/^version *= *"\(.*\)"/\1/p' python/pyproject.toml)
        [ "$got" = "$want" ] || { echo "  python/pyproject.toml: $got" >&2; bad=1; }
    else
        grep -q '^dynamic = \[.*"version"' python/pyproject.toml ||
            { echo "  python/pyproject.toml neither sets nor derives a version" >&2; bad=1; }
    fi
    got=$(node -p 'require("./node/package.json").version')
    [ "$got" = "$want" ] || { echo "  node/package.json: $got" >&2; bad=1; }
    got=$(node -p 'require("./node/package-lock.json").version')
    [ "$got" = "$want" ] || { echo "  node/package-lock.json: $got" >&2; bad=1; }
    # The project's own <version>, the first one after </parent> or <artifactId>lapilli</artifactId>.
    got=$(sed -n '/<artifactId>lapilli<\/artifactId>/{n;s/.*<version>\(.*\)<\/version>.*/\1/p;q}' jvm/pom.xml)
    [ "$got" = "$want" ] || { echo "  jvm/pom.xml: $got" >&2; bad=1; }
    # The project's public address, the workspace's `repository`: every package names the same.
    local home
    home=$(sed -n '/^\[workspace.package\]/,/^\[/s/^repository *= *"\(.*\)"/\1/p' Cargo.toml)
    [ -n "$home" ] || { echo "  Cargo.toml: no repository in [workspace.package]" >&2; bad=1; }
    for crate in core python node jvm cli; do
        grep -q '^repository.workspace = true' "$crate/Cargo.toml" ||
            { echo "  $crate/Cargo.toml does not take repository.workspace" >&2; bad=1; }
    done
    got=$(sed -n 's/^Repository *= *"\(.*\)"/\1/p' python/pyproject.toml)
    [ "$got" = "$home" ] || { echo "  python/pyproject.toml Repository: $got" >&2; bad=1; }
    got=$(node -p 'require("./node/package.json").repository?.url + " " + require("./node/package.json").homepage')
    [ "$got" = "git+$home.git $home" ] || { echo "  node/package.json repository and homepage: $got" >&2; bad=1; }
    # The POM's project, developer and scm addresses (the license URLs are the licenses').
    got=$(sed -e '/<licenses>/,/<\/licenses>/d' jvm/pom.xml | sed -n 's/.*<\(url\|connection\|developerConnection\)>\(.*\)<\/\(url\|connection\|developerConnection\)>.*/\2/p' | sort -u | tr '\n' ' ')
    [ "$got" = "$home scm:git:$home.git scm:git:ssh://git@${home#https://}.git " ] ||
        { echo "  jvm/pom.xml addresses: $got" >&2; bad=1; }
    [ $bad = 0 ] || fail "package versions or addresses disagree with the workspace Cargo.toml ($want, ${home:-no repository}): see above"
    echo "version $want: Cargo.toml, pyproject (dynamic), package.json, package-lock.json, pom.xml agree"
    echo "address $home: Cargo.toml, the crates, pyproject, package.json, pom.xml agree"
    VERSION=$want
}

check_versions
[ "$MODE" = --versions ] && exit 0

# ---------------------------------------------------------------------------------------------
# Tools, project-local.

install_tools() {
    step "tools into target/release-tools"
    mkdir -p "$TOOLS/bin"
    if command -v rustup >/dev/null; then
        rustup target add "${TARGETS[@]}" >/dev/null 2>&1
    fi
    [ -x "$TOOLS/venv/bin/python" ] || python3 -m venv "$TOOLS/venv"
    local reqs="$MATURIN $ZIGLANG $AUDITWHEEL"
    if [ "$(cat "$TOOLS/venv/.reqs" 2>/dev/null)" != "$reqs" ]; then
        "$TOOLS/venv/bin/pip" install --quiet --upgrade pip
        # shellcheck disable=SC2086
        "$TOOLS/venv/bin/pip" install --quiet $reqs
        echo "$reqs" >"$TOOLS/venv/.reqs"
    fi
    # zig from the ziglang wheel, as `zig` on PATH for cargo-zigbuild (maturin finds it itself).
    printf '#!/bin/sh\nexec "%s" -m ziglang "$@"\n' "$TOOLS/venv/bin/python" >"$TOOLS/bin/zig"
    chmod +x "$TOOLS/bin/zig"
    if [ "$("$TOOLS/bin/cargo-zigbuild" --version 2>/dev/null)" != "cargo-zigbuild $CARGO_ZIGBUILD_VERSION" ]; then
        nice -n 15 cargo install --quiet --locked --root "$TOOLS" "cargo-zigbuild@$CARGO_ZIGBUILD_VERSION"
    fi
    if ! command -v qemu-aarch64 >/dev/null; then
        [ "$(id -u)" = 0 ] || fail "qemu-aarch64 is missing: apt-get install qemu-user (needs root)"
        apt-get install -y -qq qemu-user >/dev/null
    fi
}
install_tools
export PATH="$TOOLS/bin:$PATH"
# Release libraries carry no debug line tables (the workspace's release profile keeps them for
# profiling): 10 MB becomes 1.4 MB. Every cross build sets it, so the Node and JVM libraries of a
# target share one build of the core (maturin's own environment makes it build the core again).
export CARGO_PROFILE_RELEASE_STRIP=debuginfo
# musl targets link statically by default, which a cdylib (loaded into a process that has its
# own libc) cannot do: link musl's libc.so dynamically.
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="-C target-feature=-crt-static"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="-C target-feature=-crt-static"

# ---------------------------------------------------------------------------------------------
# Build.

STAGE=$ROOT/target/release-stage   # what packages are assembled from (rebuilt by every build)

build_native() {
    step "native libraries (cargo-zigbuild): the Node addon and the JVM library for each target"
    for target in "${TARGETS[@]}"; do
        for crate in node jvm; do
            echo "-- lapilli-$crate for $(zig_target "$target")"
            nice -n 15 cargo zigbuild --quiet --release -p "lapilli-$crate" --lib --target "$(zig_target "$target")"
        done
        mkdir -p "$STAGE/native/$target"
        cp "target/$target/release/liblapilli_node.so" "target/$target/release/liblapilli_jvm.so" "$STAGE/native/$target/"
    done
}

build_python() {
    step "Python: abi3 wheels (maturin --zig) and the sdist"
    rm -rf "$DIST/python"
    for target in "${TARGETS[@]}"; do
        local compat=manylinux2014
        [ "${target##*-}" = musl ] && compat=musllinux_1_2
        echo "-- $target ($compat)"
        # A target directory of its own: maturin's flags differ from cargo-zigbuild's, and in a
        # shared one each tool's build of the core replaced the other's (both rebuilt every run).
        CARGO_TARGET_DIR=$ROOT/target/release-python \
            nice -n 15 "$TOOLS/venv/bin/maturin" build --quiet --release --zig -m python/Cargo.toml \
            --target "$target" --compatibility "$compat" -o "$DIST/python"
    done
    "$TOOLS/venv/bin/maturin" sdist -m python/Cargo.toml -o "$DIST/python"
}

build_node() {
    step "Node.js: the lapilli package and one package per platform (npm pack)"
    rm -rf "$DIST/node"
    mkdir -p "$DIST/node"
    node scripts/release/node-packages.mjs "$ROOT" "$STAGE/native" "$STAGE/npm"
    for dir in "$STAGE"/npm/*/; do
        (cd "$dir" && npm pack --silent --pack-destination "$DIST/node" >/dev/null)
    done
    ls "$DIST/node"
}

build_jvm() {
    step "JVM: one jar with every target's library, -sources.jar, -javadoc.jar, the POM"
    rm -rf "$DIST/jvm" "$STAGE/jvm"
    mkdir -p "$DIST/jvm"
    for target in "${TARGETS[@]}"; do
        mkdir -p "$STAGE/jvm/$(jvm_prefix "$target")"
        cp "$STAGE/native/$target/liblapilli_jvm.so" "$STAGE/jvm/$(jvm_prefix "$target")/"
    done
    # The generated Kotlin comes from this machine's build of the same sources (the one
    # jvm/scripts/test.sh makes: the release-only strip setting is left out so it is shared);
    # UniFFI's checksums depend on the interface only, so it fits every target's library
    # (check_library_loads compares them).
    env -u CARGO_PROFILE_RELEASE_STRIP nice -n 15 mvn -B -q -ntp -f jvm/pom.xml -Prelease \
        -Drelease.natives="$STAGE/jvm" -DskipTests clean package 2>&1 |
        sed -u 's/\x1b\[0m//g'
    local base="jvm/target/lapilli-$VERSION"
    cp "$base.jar" "$base-sources.jar" "$base-javadoc.jar" "$DIST/jvm/"
    cp jvm/pom.xml "$DIST/jvm/lapilli-$VERSION.pom"
    ls "$DIST/jvm"
}

# macOS and Windows. Reported, not fatal: they are not release targets (README, "Releases and
# platforms"). lapilli-core compiles for macOS, but the faces do not link there from Linux:
# tokio-postgres's `whoami` needs Apple's CoreFoundation and SystemConfiguration frameworks, and
# zig carries no Apple SDK (tried with cargo-zigbuild: "unable to find system framework").
probe_other_os() {
    step "macOS and Windows (not release targets): does lapilli-core compile for them?"
    local target errors
    for target in x86_64-apple-darwin aarch64-apple-darwin x86_64-pc-windows-gnu; do
        rustup target add "$target" >/dev/null 2>&1 || { echo "  --  $target: no rustup target"; continue; }
        if errors=$(CARGO_TARGET_DIR=$ROOT/target/release-other-os nice -n 15 cargo check -q -p lapilli-core \
            --target "$target" 2>&1); then
            case "$target" in
            *-apple-darwin) echo "  --  $target: lapilli-core compiles; the faces need Apple's SDK frameworks to link (see above): not built" ;;
            *) echo "  ??  $target: lapilli-core compiles now; time to add it to TARGETS and the packages" ;;
            esac
        else
            echo "  --  $target: lapilli-core does not compile ($(grep -c '^error\[' <<<"$errors") errors, e.g." \
                "$(grep -m1 -o "cannot find [a-z]* \`[a-z_0-9]*\`" <<<"$errors"))"
        fi
    done
}

if [ "$MODE" = build ]; then
    started=$SECONDS
    probe_other_os
    build_native
    build_python
    build_node
    build_jvm
    echo "built in $(((SECONDS - started) / 60)) min $(((SECONDS - started) % 60)) s"
fi

# ---------------------------------------------------------------------------------------------
# Checks: every native library inside every artifact, then each package installed and run.

CHECK=$ROOT/target/release-check   # scratch for the checks (venvs, npm projects, stores)
[ -d "$DIST/python" ] && [ -d "$DIST/node" ] && [ -d "$DIST/jvm" ] ||
    fail "no complete dist/ to check: run bash scripts/release.sh first"
rm -rf "$CHECK"
mkdir -p "$CHECK"

# Target of a library from where an artifact keeps it: the wheel's tag, the npm package's
# platform, the jar's resource prefix.
target_of() {
    local where=$1 cpu libc
    case "$where" in *x86_64* | *x64* | *x86-64*) cpu=x86_64 ;; *aarch64* | *arm64*) cpu=aarch64 ;; *) return 1 ;; esac
    case "$where" in *musl*) libc=musl ;; *) libc=gnu ;; esac
    echo "$cpu-unknown-linux-$libc"
}

# One library: the right CPU; glibc builds need no symbol version above GLIBC_MAX; musl
# builds name musl's libc and nothing of glibc.
check_elf() {
    local file=$1 target=$2 label=$3 machine needed newest
    machine=$(readelf -h "$file" | sed -n 's/^ *Machine: *//p')
    case "$target" in
    x86_64-*) [ "$machine" = "Advanced Micro Devices X86-64" ] || fail "$label: built for $machine, not x86_64" ;;
    aarch64-*) [ "$machine" = AArch64 ] || fail "$label: built for $machine, not aarch64" ;;
    esac
    needed=$(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    newest=$(objdump -T "$file" | { grep -o 'GLIBC_[0-9.]*' || true; } | sed 's/GLIBC_//' | sort -uV | tail -1)
    if [ "${target##*-}" = gnu ]; then
        [ -n "$newest" ] || fail "$label: a glibc build with no glibc symbol versions?"
        [ "$(printf '%s\n%s\n' "$newest" "$GLIBC_MAX" | sort -V | tail -1)" = "$GLIBC_MAX" ] ||
            fail "$label needs GLIBC_$newest, above $GLIBC_MAX: $(objdump -T "$file" | grep "GLIBC_$newest" | head -3)"
        echo "  ok  $label: $machine, glibc symbols up to $newest, needs $needed"
    else
        [ -z "$newest" ] || fail "$label: a musl build with glibc symbol versions (GLIBC_$newest)"
        case " $needed " in *" libc.so.6 "* | *ld-linux*) fail "$label: a musl build that needs glibc ($needed)" ;; esac
        case " $needed " in *" libc.so "*) ;; *) fail "$label: a musl build that does not name musl's libc.so ($needed)" ;; esac
        echo "  ok  $label: $machine, musl, needs $needed"
    fi
}

check_artifacts_elf() {
    step "native libraries in every artifact: CPU, glibc <= $GLIBC_MAX, musl without glibc"
    local unpacked=$CHECK/elf f target count=0
    for wheel in "$DIST"/python/*.whl; do
        target=$(target_of "$(basename "$wheel")")
        mkdir -p "$unpacked/${wheel##*/}"
        unzip -q -o "$wheel" 'lapilli/*.so' -d "$unpacked/${wheel##*/}"
        for f in "$unpacked/${wheel##*/}"/lapilli/*.so; do
            check_elf "$f" "$target" "${wheel##*/}:lapilli/${f##*/}"
            count=$((count + 1))
        done
    done
    for tgz in "$DIST"/node/lapilli-linux-*.tgz; do
        target=$(target_of "$(basename "$tgz")")
        mkdir -p "$unpacked/${tgz##*/}"
        tar -xzf "$tgz" -C "$unpacked/${tgz##*/}"
        for f in "$unpacked/${tgz##*/}"/package/*.node; do
            check_elf "$f" "$target" "${tgz##*/}:${f##*/}"
            count=$((count + 1))
        done
    done
    local jar=$DIST/jvm/lapilli-$VERSION.jar
    mkdir -p "$unpacked/jar"
    unzip -q -o "$jar" '*/liblapilli_jvm.so' -d "$unpacked/jar"
    for target in "${TARGETS[@]}"; do
        f="$unpacked/jar/$(jvm_prefix "$target")/liblapilli_jvm.so"
        [ -f "$f" ] || fail "${jar##*/} has no $(jvm_prefix "$target")/liblapilli_jvm.so"
        check_elf "$f" "$target" "${jar##*/}:$(jvm_prefix "$target")/liblapilli_jvm.so"
        count=$((count + 1))
    done
    [ $count = 12 ] || fail "expected 12 native libraries (3 packages x 4 targets), found $count"
}

# The aarch64 runtimes (python3.11, node, openjdk-17), glibc and musl's loader, from Debian's arm64 packages
# with a private apt state (the machine's apt and dpkg are not touched), unpacked into a sysroot
# that qemu-aarch64 -L runs them in.
ARM_SYSROOT=$TOOLS/sysroot-arm64
ARM_PACKAGES=(libc6 musl python3.11 nodejs openjdk-17-jre-headless)
arm64_sysroot() {
    local apt=$TOOLS/apt-arm64
    [ "$(cat "$ARM_SYSROOT/.packages" 2>/dev/null)" = "${ARM_PACKAGES[*]}" ] && return
    step "aarch64 sysroot from Debian's arm64 packages (${ARM_PACKAGES[*]})"
    mkdir -p "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$apt/state/lists/partial" "$apt/cache/archives/partial"
    touch "$apt/state/status"
    # Debian 12 whatever the host (a CI runner's Ubuntu has no arm64 on its own mirror); its
    # archive key comes with Debian, or with Ubuntu's debian-archive-keyring package.
    [ -f /usr/share/keyrings/debian-archive-keyring.gpg ] ||
        fail "no /usr/share/keyrings/debian-archive-keyring.gpg: apt-get install debian-archive-keyring"
    printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" "Suites: bookworm bookworm-updates" \
        "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
        >"$apt/etc/sources.list.d/debian.sources"
    local opts=(-o "Dir::Etc=$apt/etc" -o "Dir::State=$apt/state" -o "Dir::Cache=$apt/cache"
        -o "Dir::State::status=$apt/state/status" -o APT::Architecture=arm64 -o APT::Architectures::=arm64
        -o Debug::NoLocking=1 -o quiet=2 -o APT::Sandbox::User=root)
    apt-get "${opts[@]}" update
    apt-get "${opts[@]}" install -y --download-only --no-install-recommends "${ARM_PACKAGES[@]}" >/dev/null
    rm -rf "$ARM_SYSROOT"
    mkdir -p "$ARM_SYSROOT"
    for deb in "$apt"/cache/archives/*.deb; do dpkg-deb -x "$deb" "$ARM_SYSROOT"; done
    echo "${ARM_PACKAGES[*]}" >"$ARM_SYSROOT/.packages"
}
arm64() { qemu-aarch64 -L "$ARM_SYSROOT" "$@"; }

# A musllinux wheel: its WHEEL file carries the tag, and its extension needs nothing beyond
# what auditwheel's policy for that tag allows (the ELF check already saw musl, no glibc).
check_musl_wheel() {
    local wheel=$1 tag=$2 tags needed
    tags=$(unzip -p "$wheel" '*.dist-info/WHEEL' | sed -n 's/^Tag: //p' | tr '\n' ' ')
    [[ " $tags" == *"-$tag "* ]] || fail "${wheel##*/} is tagged $tags, not $tag"
    needed=$(unzip -p "$wheel" 'lapilli/_lapilli.abi3.so' >"$CHECK/musl-wheel.so" &&
        readelf -d "$CHECK/musl-wheel.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    "$TOOLS/venv/bin/python" - "$tag" $needed <<'PY'
import json, sys
from importlib.resources import files
tag, needed = sys.argv[1], sys.argv[2:]
policies = json.loads(files("auditwheel").joinpath("policy/musllinux-policy.json").read_text())
name = tag.replace("_x86_64", "").replace("_aarch64", "")
(policy,) = [p for p in policies if p["name"] == name]
extra = [n for n in needed if n not in policy["lib_whitelist"]]
if extra:
    sys.exit(f"release: {tag} does not allow {extra} (allowed: {policy['lib_whitelist']})")
PY
    echo "  ok  ${wheel##*/}: tagged $tag; needs only $needed(auditwheel's $tag policy allows it)"
}

check_python() {
    step "Python: auditwheel show (each tag); the sdist builds on its own; x86_64 and aarch64 smoke tests"
    local wheel tag shown
    for wheel in "$DIST"/python/*.whl; do
        case "$wheel" in
        *musllinux_1_2_x86_64*) tag=musllinux_1_2_x86_64 ;; *musllinux_1_2_aarch64*) tag=musllinux_1_2_aarch64 ;;
        *manylinux_2_17_x86_64*) tag=manylinux_2_17_x86_64 ;; *manylinux_2_17_aarch64*) tag=manylinux_2_17_aarch64 ;;
        *) fail "a wheel with no expected tag: ${wheel##*/}" ;;
        esac
        if [[ $tag == musllinux* ]]; then
            # auditwheel show needs a musl host to tell a musl library (it takes the host's libc
            # for one that names musl's plain `libc.so`): the equivalent check here is the
            # wheel's own tag plus auditwheel's musllinux_1_2 policy, read from auditwheel.
            check_musl_wheel "$wheel" "$tag"
            continue
        fi
        shown=$("$TOOLS/venv/bin/auditwheel" show "$wheel" 2>&1 | tr -s ' \n' '  ')
        grep -q "consistent with the following platform tag: \"$tag\"" <<<"$shown" ||
            { echo "$shown"; fail "auditwheel does not confirm $tag for ${wheel##*/}"; }
        echo "  ok  ${wheel##*/}: auditwheel confirms $tag"
    done
    [ "$(ls "$DIST"/python/*.whl | wc -l)" = 4 ] || fail "expected 4 wheels in dist/python"

    # A clean venv, the wheel from dist/ alone: pip must pick the manylinux x86_64 one.
    python3.11 -m venv "$CHECK/py-wheel"
    "$CHECK/py-wheel/bin/pip" install --quiet --no-index --find-links "$DIST/python" --only-binary lapilli lapilli
    [ -f "$CHECK"/py-wheel/lib/python3.11/site-packages/lapilli/_lapilli.abi3.so ] || fail "pip installed no extension module"
    grep -q 'manylinux_2_17_x86_64' "$CHECK"/py-wheel/lib/python3.11/site-packages/lapilli-*.dist-info/WHEEL ||
        fail "pip did not install the manylinux x86_64 wheel"
    (cd "$CHECK" && py-wheel/bin/python "$ROOT/scripts/release/smoke.py" "$CHECK/py-wheel-store")

    # The sdist: unpacked in an empty folder, installed from there (maturin from PyPI builds it).
    mkdir -p "$CHECK/sdist"
    tar -xzf "$DIST/python/lapilli-$VERSION.tar.gz" -C "$CHECK/sdist"
    python3.11 -m venv "$CHECK/py-sdist"
    # A cache of compiled dependencies only (the sources are the sdist's): a re-check is quick.
    (cd "$CHECK/sdist/lapilli-$VERSION" && CARGO_TARGET_DIR=$ROOT/target/release-sdist-build \
        nice -n 15 "$CHECK/py-sdist/bin/pip" install --quiet --no-binary lapilli .)
    (cd "$CHECK" && py-sdist/bin/python "$ROOT/scripts/release/smoke.py" "$CHECK/py-sdist-store")

    # aarch64: Debian's python3.11 under qemu imports the manylinux aarch64 wheel (unpacked,
    # as pip would: a wheel is a zip of the site-packages files).
    arm64_sysroot
    mkdir -p "$CHECK/py-arm64"
    unzip -q "$DIST"/python/lapilli-*manylinux_2_17_aarch64*.whl -d "$CHECK/py-arm64"
    (cd "$CHECK" && PYTHONPATH="$CHECK/py-arm64" arm64 "$ARM_SYSROOT/usr/bin/python3.11" \
        "$ROOT/scripts/release/smoke.py" "$CHECK/py-arm64-store")
}

# An empty npm project installing the packed tarballs as a user's would install from the
# registry: `lapilli` from its tarball, and its optional platform packages (which are not on a
# registry yet) from theirs through `overrides`, so that npm itself picks the ones whose os,
# cpu and libc fit (`npm install --cpu/--libc` asks for another machine's).
npm_project() {
    local dir=$1
    shift
    mkdir -p "$dir"
    node -e '
        const [dir, dist, version] = process.argv.slice(1)
        const overrides = {}
        for (const p of ["linux-x64-gnu", "linux-x64-musl", "linux-arm64-gnu", "linux-arm64-musl"])
          overrides[`lapilli-${p}`] = `file:${dist}/lapilli-${p}-${version}.tgz`
        require("fs").writeFileSync(`${dir}/package.json`, JSON.stringify({
          name: "lapilli-release-check", version: "1.0.0", private: true, type: "module",
          dependencies: { lapilli: `file:${dist}/lapilli-${version}.tgz` }, overrides }, null, 2))
    ' "$dir" "$DIST/node" "$VERSION"
    (cd "$dir" && npm install --silent --no-audit --no-fund "$@")
}

check_node() {
    step "Node.js: package layout; npm installs the tarballs on x86_64 and for aarch64; smoke tests"
    local meta
    meta=$(tar -xzOf "$DIST/node/lapilli-$VERSION.tgz" package/package.json)
    node -e '
        const m = JSON.parse(process.argv[1])
        const want = ["linux-x64-gnu", "linux-x64-musl", "linux-arm64-gnu", "linux-arm64-musl"].map((p) => `lapilli-${p}`)
        const got = Object.keys(m.optionalDependencies ?? {}).sort()
        if (JSON.stringify(got) !== JSON.stringify(want.sort())) throw new Error(`optionalDependencies: ${got}`)
        if (m.engines?.node !== ">=20") throw new Error(`engines: ${JSON.stringify(m.engines)}`)
        if (!m.exports?.["."]) throw new Error("no exports")
    ' "$meta"
    for tgz in "$DIST"/node/lapilli-linux-*.tgz; do
        meta=$(tar -xzOf "$tgz" package/package.json)
        node -e '
            const m = JSON.parse(process.argv[1])
            const [, cpu, libc] = m.name.match(/^lapilli-linux-(x64|arm64)-(gnu|musl)$/)
            const ok = m.os?.join() === "linux" && m.cpu?.join() === cpu && m.libc?.join() === (libc === "gnu" ? "glibc" : "musl")
            if (!ok) throw new Error(`${m.name}: os ${m.os} cpu ${m.cpu} libc ${m.libc}`)
        ' "$meta"
    done
    echo "  ok  lapilli: optionalDependencies on 4 platform packages, exports, engines >=20; each has os, cpu, libc"

    npm_project "$CHECK/npm-x64"
    [ "$(ls "$CHECK/npm-x64/node_modules" | grep -c '^lapilli-linux-')" = 1 ] &&
        [ -d "$CHECK/npm-x64/node_modules/lapilli-linux-x64-gnu" ] ||
        fail "npm installed $(ls "$CHECK/npm-x64/node_modules" | grep '^lapilli-linux-' | tr '\n' ' ')instead of lapilli-linux-x64-gnu alone"
    (cd "$CHECK/npm-x64" && cp "$ROOT/scripts/release/smoke.mjs" . && node smoke.mjs "$CHECK/npm-x64-store")

    # Without its platform package the loader says which one is missing.
    rm -rf "$CHECK/npm-x64/node_modules/lapilli-linux-x64-gnu"
    local said
    said=$(cd "$CHECK/npm-x64" && node smoke.mjs "$CHECK/npm-x64-store2" 2>&1) && fail "lapilli loaded without its platform package"
    grep -q "the native addon for this platform (linux-x64-gnu) is not installed" <<<"$said" ||
        { echo "$said"; fail "the loader's error does not name the missing platform"; }
    echo "  ok  without lapilli-linux-x64-gnu: \"$(grep -o 'lapilli: the native addon[^:]*' <<<"$said")\""

    # aarch64: npm resolves for an arm64 glibc machine; Debian's arm64 node runs the smoke test.
    arm64_sysroot
    npm_project "$CHECK/npm-arm64" --cpu=arm64 --os=linux --libc=glibc
    [ -d "$CHECK/npm-arm64/node_modules/lapilli-linux-arm64-gnu" ] || fail "npm --cpu=arm64 did not install lapilli-linux-arm64-gnu"
    (cd "$CHECK/npm-arm64" && cp "$ROOT/scripts/release/smoke.mjs" . &&
        arm64 "$ARM_SYSROOT/usr/bin/node" smoke.mjs "$CHECK/npm-arm64-store")
}

check_jvm() {
    step "JVM: jar contents, POM metadata; a fresh Maven project runs the Kotlin smoke test on x86_64 and aarch64"
    local jar=$DIST/jvm/lapilli-$VERSION.jar pom=$DIST/jvm/lapilli-$VERSION.pom
    for extra in sources javadoc; do
        [ "$(unzip -Z1 "$DIST/jvm/lapilli-$VERSION-$extra.jar" | grep -c -v '/$')" -gt 2 ] ||
            fail "lapilli-$VERSION-$extra.jar is empty"
    done
    # (Listings are read whole first: `unzip | grep -q` fails under pipefail when grep stops early.)
    local listing
    listing=$(unzip -Z1 "$DIST/jvm/lapilli-$VERSION-sources.jar")
    grep -q '^dev/lapilli/Store.kt$' <<<"$listing" || fail "sources jar lacks Store.kt"
    listing=$(unzip -Z1 "$DIST/jvm/lapilli-$VERSION-javadoc.jar")
    grep -q 'index.html$' <<<"$listing" || fail "javadoc jar has no index.html"
    # What Maven Central's validation requires of the POM.
    python3 - "$pom" <<'PY'
import sys, xml.etree.ElementTree as ET
ns = {"m": "http://maven.apache.org/POM/4.0.0"}
root = ET.parse(sys.argv[1]).getroot()
need = ["m:groupId", "m:artifactId", "m:version", "m:name", "m:description", "m:url",
        "m:licenses/m:license/m:name", "m:licenses/m:license/m:url",
        "m:developers/m:developer/m:name", "m:scm/m:url", "m:scm/m:connection"]
missing = [p for p in need if not (root.findtext(p, namespaces=ns) or "").strip()]
if missing:
    sys.exit(f"release: the POM lacks what Maven Central requires: {', '.join(missing)}")
PY
    echo "  ok  jar with 4 native libraries, -sources.jar, -javadoc.jar, POM with Central's required metadata"

    # A local repository of its own: the release jar never replaces the development build in ~/.m2.
    local repo=$TOOLS/m2 smoke=$CHECK/kotlin-smoke
    local mvnr=(mvn -B -q -ntp -Dmaven.repo.local="$repo")
    "${mvnr[@]}" install:install-file -Dfile="$jar" -DpomFile="$pom" \
        -Dsources="$DIST/jvm/lapilli-$VERSION-sources.jar" -Djavadoc="$DIST/jvm/lapilli-$VERSION-javadoc.jar"
    cp -r scripts/release/kotlin-smoke "$smoke"
    "${mvnr[@]}" -f "$smoke/pom.xml" -Dlapilli.version="$VERSION" package
    "${mvnr[@]}" -f "$smoke/pom.xml" -Dlapilli.version="$VERSION" dependency:build-classpath \
        -Dmdep.outputFile="$smoke/classpath.txt"
    local cp="$smoke/target/classes:$(cat "$smoke/classpath.txt")"
    grep -q "lapilli-$VERSION.jar" <<<"$cp" || fail "the smoke project does not use dev.lapilli:lapilli:$VERSION"
    java -cp "$cp" SmokeKt "$CHECK/kotlin-x64-store"
    # aarch64: Debian's arm64 OpenJDK 17 under qemu, same classpath (JNA's own native part
    # for linux-aarch64 comes out of the jna jar, ours out of lapilli's).
    arm64_sysroot
    arm64 "$(ls -d "$ARM_SYSROOT"/usr/lib/jvm/java-17-openjdk-arm64)/bin/java" -cp "$cp" SmokeKt "$CHECK/kotlin-arm64-store"
}

# The Rust core's whole test suite on the other machines: built for x86_64 musl (static, run
# here) and for aarch64 glibc (linked by zig, run under qemu-aarch64 on Debian's arm64 glibc).
# A target directory of their own: their flags differ from the release libraries'.
check_core_tests() {
    step "Rust core tests built for x86_64-unknown-linux-musl (static), run natively"
    CARGO_TARGET_DIR=$ROOT/target/release-tests CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS= \
        test_summary "$CHECK/core-musl.log" nice -n 15 cargo-zigbuild test -p lapilli-core --target x86_64-unknown-linux-musl
    step "Rust core tests built for aarch64-unknown-linux-gnu, run under qemu-aarch64"
    arm64_sysroot
    # LAPILLI_TEST_RUNNER: the crash, follow and open-cost tests start this same binary as
    # children, which without a binfmt handler only qemu can run (core/tests/common/mod.rs).
    # Skipped here, and only here: the two tests of what the kernel reads around a page fault
    # (page-cache residency after a cold read, and after a reopen). qemu-user accepts
    # `madvise` and does not pass it on, so the point-read advice they check never reaches the
    # kernel under qemu; on an aarch64 kernel they run as everywhere else. (Measured on
    # 2026-12-01: these two failed under qemu, every other test passed.)
    CARGO_TARGET_DIR=$ROOT/target/release-tests \
        CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $ARM_SYSROOT" \
        LAPILLI_TEST_RUNNER="qemu-aarch64 -L $ARM_SYSROOT" \
        test_summary "$CHECK/core-aarch64.log" nice -n 15 cargo-zigbuild test -p lapilli-core --target aarch64-unknown-linux-gnu.2.17 \
        -- --skip a_cold_rare_read_reads_about_what_it_verifies \
        --skip reopening_reads_no_log_it_does_not_scan_and_keeps_the_cached_parts
}

# Runs a cargo test command into LOG; prints the totals, or the log's end and fails.
test_summary() {
    local log=$1
    shift
    if ! "$@" >"$log" 2>&1; then
        grep -E -A15 '^failures:|panicked' "$log" | head -60
        tail -5 "$log"
        fail "$* failed (log: $log)"
    fi
    awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^(passed|failed|ignored);?$/) n[$(i+1)] += $i; runs++ }
         END { printf "  ok  %d test binaries: %d passed, %d failed, %d ignored\n", runs, n["passed;"], n["failed;"], n["ignored;"] }' "$log"
}

# The JVM library of every target, loaded and called from a small C program built for that
# target by zig (scripts/release/loadcheck.c): natively, under qemu-aarch64, and with musl's
# loader (Debian's musl package, unpacked, not installed) for the musl builds. For musl this
# is the one load of a shipped library here: Debian has no musl Python, Node or JVM.
check_library_loads() {
    step "JVM library of every target loaded by a small program for that target (glibc, musl, x86_64, aarch64)"
    arm64_sysroot
    local musl64=$TOOLS/sysroot-musl-amd64 jar=$DIST/jvm/lapilli-$VERSION.jar
    if [ ! -e "$musl64/lib/ld-musl-x86_64.so.1" ]; then
        mkdir -p "$musl64"
        (cd "$TOOLS" && rm -f musl_*_amd64.deb && apt-get download -qq -o APT::Sandbox::User=root musl:amd64 && dpkg-deb -x musl_*_amd64.deb "$musl64")
    fi
    local libs=$CHECK/elf/jar reference="" target out checksums
    checksums=$(nm -D --defined-only "$libs/linux-x86-64/liblapilli_jvm.so" | awk '/uniffi_lapilli_jvm_checksum_/ { print $3 }')
    for target in "${TARGETS[@]}"; do
        local zt=${target/-unknown/}
        [ "${target##*-}" = gnu ] && zt=$zt.2.17
        local prog=$CHECK/loadcheck-$target lib=$libs/$(jvm_prefix "$target")/liblapilli_jvm.so
        if [ "${target##*-}" = musl ]; then
            zig cc -target "$zt" -dynamic -O2 -o "$prog" scripts/release/loadcheck.c
        else
            zig cc -target "$zt" -O2 -o "$prog" scripts/release/loadcheck.c
        fi
        # shellcheck disable=SC2086
        case "$target" in
        x86_64-*-gnu) out=$("$prog" "$lib" $checksums) ;;
        x86_64-*-musl) out=$("$musl64/lib/ld-musl-x86_64.so.1" "$prog" "$lib" $checksums) ;;
        aarch64-*) out=$(arm64 "$prog" "$lib" $checksums) ;;
        esac
        [ -n "$reference" ] || reference=$out
        [ "$out" = "$reference" ] || fail "$(jvm_prefix "$target")/liblapilli_jvm.so answers differently from linux-x86-64's"
        echo "  ok  $(jvm_prefix "$target")/liblapilli_jvm.so from ${jar##*/}: loaded, $(wc -l <<<"$out") calls answer as linux-x86-64's"
    done
}

check_artifacts_elf
check_library_loads
check_python
check_node
check_jvm
check_core_tests
step "release $VERSION: every check passed ($(((SECONDS) / 60)) min $((SECONDS % 60)) s in all)"
