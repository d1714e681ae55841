//! doorbell::fuzzing::queue fed arbitrary bytes (see src/fuzzing.rs).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = doorbell::fuzzing::queue(data);
});
