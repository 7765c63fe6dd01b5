//! Arbitrary bytes as a module's only `main.tf.json` (the JSON syntax): read, then evaluated
//! (variables, locals, functions, `count`, `for_each`, modules). Any panic, stack overflow, hang or runaway
//! allocation is a finding; errors are the expected outcome for most inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kraken_convert_fuzz::run("main.tf.json", data);
});
