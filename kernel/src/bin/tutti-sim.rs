//! `tutti-sim --steps N --seed S [--seeds K]`: runs the lifecycle simulator (see
//! docs/RELIABILITY.md); a failing seed prints its shrunk replay and exits 1.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: tutti-sim [--steps N] [--seed S] [--seeds K] (defaults: 100000 steps, seed 1, 1 seed; K seeds from S up)";

/// What to run: `steps` actions of each of `seeds` seeds from `seed` up.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    steps: u64,
    seed: u64,
    seeds: u64,
}

/// What the arguments ask for: a run, or the usage.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Run(Run),
    Help,
}

fn main() -> ExitCode {
    let run = match parse(std::env::args().skip(1)) {
        Ok(Ask::Run(run)) => run,
        Ok(Ask::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tutti-sim: {e}; {USAGE}");
            return ExitCode::from(2);
        }
    };
    for s in (0..run.seeds).map(|i| run.seed.wrapping_add(i)) {
        let start = Instant::now();
        match tutti_kernel::sim::run(s, run.steps) {
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

fn parse(mut args: impl Iterator<Item = String>) -> Result<Ask, String> {
    let mut run = Run {
        steps: 100_000,
        seed: 1,
        seeds: 1,
    };
    while let Some(flag) = args.next() {
        let slot = match flag.as_str() {
            "--steps" => &mut run.steps,
            "--seed" => &mut run.seed,
            "--seeds" => &mut run.seeds,
            "-h" | "--help" => return Ok(Ask::Help),
            other => return Err(format!("unknown argument {other}")),
        };
        let value = args.next().ok_or(format!("{flag} needs a number"))?;
        *slot = value
            .parse()
            .map_err(|_| format!("{flag} takes a whole number, not {value}"))?;
    }
    // A run of nothing would pass without checking anything.
    for (flag, value) in [("--steps", run.steps), ("--seeds", run.seeds)] {
        if value == 0 {
            return Err(format!("{flag} must be at least 1"));
        }
    }
    Ok(Ask::Run(run))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> Result<Ask, String> {
        parse(args.iter().map(|a| a.to_string()))
    }

    #[test]
    fn arguments_name_what_is_wrong_with_them() {
        let run = Run {
            steps: 5,
            seed: 7,
            seeds: 2,
        };
        let args = ["--steps", "5", "--seed", "7", "--seeds", "2"];
        assert_eq!(parsed(&args), Ok(Ask::Run(run)));
        assert_eq!(parsed(&["--help"]), Ok(Ask::Help));
        assert_eq!(
            parsed(&["--seeds", "0"]),
            Err("--seeds must be at least 1".into())
        );
        assert_eq!(
            parsed(&["--steps", "0"]),
            Err("--steps must be at least 1".into())
        );
        assert_eq!(parsed(&["--seed"]), Err("--seed needs a number".into()));
        assert_eq!(
            parsed(&["--steps", "-3"]),
            Err("--steps takes a whole number, not -3".into())
        );
        assert_eq!(parsed(&["-x"]), Err("unknown argument -x".into()));
    }
}
