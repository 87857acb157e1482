#!/usr/bin/env bash
# Tests `scripts/release.sh --versions` (run by scripts/test.sh): it passes on the repository,
# and on a copy where one package's version or address differs it fails naming that file and value.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/release.sh --versions

copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
for f in scripts/release.sh Cargo.toml core/Cargo.toml python/Cargo.toml python/pyproject.toml \
    node/Cargo.toml node/package.json node/package-lock.json jvm/Cargo.toml jvm/pom.xml cli/Cargo.toml; do
    mkdir -p "$copy/$(dirname "$f")"
    cp "$f" "$copy/$f"
done
expect_refused() { # FILE: what the message must name
    local out
    if out=$(bash "$copy/scripts/release.sh" --versions 2>&1); then
        echo "versions-test: a disagreeing $1 was accepted"; exit 1
    fi
    grep -q "$1" <<<"$out" || { echo "versions-test: the refusal does not name $1:"; echo "$out"; exit 1; }
}
sed -i 's/"version": "\([0-9.]*\)"/"version": "9.9.9"/' "$copy/node/package.json"
expect_refused "node/package.json: 9.9.9"
cp node/package.json "$copy/node/package.json"
sed -i '0,/<version>[0-9.]*<\/version>/s//<version>9.9.9<\/version>/' "$copy/jvm/pom.xml"
expect_refused "jvm/pom.xml: 9.9.9"
cp jvm/pom.xml "$copy/jvm/pom.xml"
sed -i 's/^version.workspace = true/version = "9.9.9"/' "$copy/python/Cargo.toml"
expect_refused "python/Cargo.toml does not take version.workspace"
cp python/Cargo.toml "$copy/python/Cargo.toml"
sed -i 's|<developerConnection>scm:git:ssh://git@github.com/[^<]*</developerConnection>|<developerConnection>scm:git:ssh://git@example.org/x.git</developerConnection>|' "$copy/jvm/pom.xml"
expect_refused "jvm/pom.xml addresses: .*example.org"
cp jvm/pom.xml "$copy/jvm/pom.xml"
sed -i 's|^Repository = .*|Repository = "https://example.org/other"|' "$copy/python/pyproject.toml"
expect_refused "python/pyproject.toml Repository: https://example.org/other"
echo "versions-test: ok (agreement passes; versions in node/package.json, jvm/pom.xml, python/Cargo.toml and addresses in jvm/pom.xml, python/pyproject.toml disagreeing are refused)"
