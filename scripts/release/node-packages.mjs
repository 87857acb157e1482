// Lays out the npm packages of a release (napi-rs's per-platform layout) in STAGE, from the
// repository's node/ and the addons in NATIVE/<rust target>/liblapilli_node.so:
//   STAGE/lapilli/                 the JS package; optionalDependencies on every platform package
//   STAGE/lapilli-linux-x64-gnu/   one per target: the addon only, with os, cpu and libc so that
//   ...                            npm installs only the one that fits (native.js loads it)
// Usage: node node-packages.mjs REPO_ROOT NATIVE STAGE   (scripts/release.sh runs `npm pack` after)
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'

const [root, nativeDir, stage] = process.argv.slice(2)
const main = JSON.parse(readFileSync(join(root, 'node/package.json'), 'utf8'))
const { version, license } = main

/** napi-rs's platform name for a Rust target, and npm's cpu and libc values for it. */
function platformOf(target) {
  const [arch, , os, abi] = target.split('-')
  const cpu = { x86_64: 'x64', aarch64: 'arm64' }[arch]
  if (os !== 'linux' || !cpu || !['gnu', 'musl'].includes(abi)) throw new Error(`no npm layout for ${target}`)
  return { name: `linux-${cpu}-${abi}`, cpu, libc: abi === 'gnu' ? 'glibc' : 'musl' }
}

rmSync(stage, { recursive: true, force: true })
const optionalDependencies = {}
for (const target of main.napi.targets) {
  const platform = platformOf(target)
  const pkgName = `lapilli-${platform.name}`
  const addon = `lapilli.${platform.name}.node`
  const dir = join(stage, pkgName)
  mkdirSync(dir, { recursive: true })
  copyFileSync(join(nativeDir, target, 'liblapilli_node.so'), join(dir, addon))
  writeFileSync(join(dir, 'package.json'), JSON.stringify({
    name: pkgName,
    version,
    description: `The native addon of lapilli for ${platform.name} (${target}); install lapilli, not this`,
    license,
    repository: main.repository,
    os: ['linux'],
    cpu: [platform.cpu],
    libc: [platform.libc],
    main: addon,
    files: [addon],
    engines: main.engines,
  }, null, 2) + '\n')
  writeFileSync(join(dir, 'README.md'),
    `# ${pkgName}\n\nThe native addon of [lapilli](https://www.npmjs.com/package/lapilli) for ${platform.name}.\n` +
    'npm installs it with `lapilli` on machines it fits; do not depend on it directly.\n')
  optionalDependencies[pkgName] = version
}

const dir = join(stage, 'lapilli')
mkdirSync(dir, { recursive: true })
for (const file of [...main.files, 'README.md']) {
  mkdirSync(dirname(join(dir, file)), { recursive: true })
  copyFileSync(join(root, 'node', file), join(dir, file))
}
const { devDependencies, scripts, napi, ...published } = main
writeFileSync(join(dir, 'package.json'), JSON.stringify({ ...published, optionalDependencies }, null, 2) + '\n')
console.log(`staged lapilli ${version} and ${Object.keys(optionalDependencies).join(', ')} in ${stage}`)
