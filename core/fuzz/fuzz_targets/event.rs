#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| lapilli_core::fuzzing::event(bytes));
