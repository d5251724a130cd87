//! Fuzz the non-streaming response/error body parsers of every wire (first byte picks it).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    foldwire_fuzz::check_body(data);
});
