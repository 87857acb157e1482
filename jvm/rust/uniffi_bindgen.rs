//! The bindings generator, built only with `--features cli` where bindings are made.
fn main() {
    uniffi::uniffi_bindgen_main()
}
