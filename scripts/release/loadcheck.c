/* Loads the JVM library (liblapilli_jvm.so) of one target and calls into it, without a JVM:
 * UniFFI's contract version and the checksum of every exported function named on the command
 * line. scripts/release.sh builds this for each target with zig cc, runs it natively or under
 * qemu-aarch64 (glibc or musl loader), and compares the output with the x86_64 glibc build's:
 * equal checksums mean the one generated Kotlin file in the jar fits every target's library.
 * Usage: loadcheck LIBRARY [CHECKSUM_FUNCTION...] */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: loadcheck LIBRARY [CHECKSUM_FUNCTION...]\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "loadcheck: %s\n", dlerror());
        return 1;
    }
    uint32_t (*contract)(void) = (uint32_t (*)(void))dlsym(lib, "ffi_lapilli_jvm_uniffi_contract_version");
    if (!contract) {
        fprintf(stderr, "loadcheck: %s has no ffi_lapilli_jvm_uniffi_contract_version\n", argv[1]);
        return 1;
    }
    printf("contract_version %u\n", contract());
    for (int i = 2; i < argc; i++) {
        uint16_t (*checksum)(void) = (uint16_t (*)(void))dlsym(lib, argv[i]);
        if (!checksum) {
            fprintf(stderr, "loadcheck: %s has no %s\n", argv[1], argv[i]);
            return 1;
        }
        printf("%s %u\n", argv[i], checksum());
    }
    return 0;
}
