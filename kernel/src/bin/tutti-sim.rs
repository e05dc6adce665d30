//! `tutti-sim --steps N --seed S [--seeds K]`: runs the lifecycle simulator (see
//! docs/RELIABILITY.md); a failing seed prints its shrunk replay and exits 1.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let (steps, seed, seeds) = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tutti-sim: {e}; usage: tutti-sim [--steps N] [--seed S] [--seeds K]");
            return ExitCode::from(2);
        }
    };
    for s in seed..seed.saturating_add(seeds) {
        let start = Instant::now();
        match tutti_kernel::sim::run(s, steps) {
            Ok(sum) => {
                let secs = start.elapsed().as_secs_f64();
                println!(
                    "seed {s}: {} steps, {} inputs, {} spawns, {} commits, {} fences, {} restarts ({} crash loops) in {secs:.2} s ({:.0} steps/s)",
                    sum.steps,
                    sum.inputs,
                    sum.spawns,
                    sum.commits,
                    sum.fences,
                    sum.restarts,
                    sum.crash_loops,
                    sum.steps as f64 / secs.max(1e-9)
                );
            }
            Err(f) => {
                print!("{f}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<(u64, u64, u64), String> {
    let (mut steps, mut seed, mut seeds) = (100_000, 1, 1);
    while let Some(flag) = args.next() {
        let slot = match flag.as_str() {
            "--steps" => &mut steps,
            "--seed" => &mut seed,
            "--seeds" => &mut seeds,
            other => return Err(format!("unknown argument {other}")),
        };
        let value = args.next().ok_or(format!("{flag} needs a number"))?;
        *slot = value
            .parse()
            .map_err(|_| format!("{flag} takes a whole number, not {value}"))?;
    }
    Ok((steps, seed, seeds))
}
