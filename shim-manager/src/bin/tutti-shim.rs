//! The launcher every `tutti-connector-<key>` shim runs (SPEC §8).
#![forbid(unsafe_code)]

fn main() {
    let code = tutti_shim_manager::shim_main(std::env::args_os().collect());
    std::process::exit(code);
}
