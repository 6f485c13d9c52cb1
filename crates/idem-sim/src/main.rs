//! `idem-sim`: runs seeds of the request-lifecycle simulation and says what they found.
//!
//! ```text
//! idem-sim --seeds 100000 [--first 0] [--clock database|steady|wall]   # many seeds; stops at the first violation
//! idem-sim --seed 4711 --trace                                          # one seed, every event
//! ```

use std::time::{Duration, Instant};

use idem_sim::clock::Kept;
use idem_sim::{Options, run};

struct Args {
    first: u64,
    seeds: u64,
    trace: bool,
    kept: Kept,
    keep_going: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args { first: 0, seeds: 1000, trace: false, kept: Kept::Database, keep_going: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--seeds" => args.seeds = value()?.parse().map_err(|e| format!("--seeds: {e}"))?,
            "--first" => args.first = value()?.parse().map_err(|e| format!("--first: {e}"))?,
            "--seed" => {
                args.first = value()?.parse().map_err(|e| format!("--seed: {e}"))?;
                args.seeds = 1;
            }
            "--trace" => args.trace = true,
            "--keep-going" => args.keep_going = true,
            "--clock" => {
                args.kept = match value()?.as_str() {
                    "database" => Kept::Database,
                    "steady" => Kept::Steady,
                    "wall" => Kept::Wall,
                    other => return Err(format!("--clock: {other:?} is not database, steady or wall")),
                }
            }
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(args)
}

fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(why) => {
            if !why.is_empty() {
                eprintln!("idem-sim: {why}");
            }
            eprintln!(
                "usage: idem-sim [--seeds N] [--first S] [--seed S] [--trace] [--keep-going] [--clock database|steady|wall]"
            );
            std::process::exit(2);
        }
    };
    let options = Options { kept: args.kept, trace: args.trace };
    let began = Instant::now();
    let (mut failed, mut simulated, mut documented, mut ran) = (0u64, Duration::ZERO, 0usize, 0u64);
    let mut faults: std::collections::BTreeMap<&'static str, u64> = Default::default();
    for seed in args.first..args.first + args.seeds {
        let outcome = run(seed, options);
        ran += 1;
        simulated += outcome.stats.simulated;
        documented += outcome.verdict.documented.len();
        for f in &outcome.stats.faults {
            *faults.entry(f).or_default() += 1;
        }
        if let Some(trace) = &outcome.trace {
            print!("{trace}");
        }
        if !outcome.verdict.violations.is_empty() {
            failed += 1;
            println!("seed {seed}: {} violation(s)", outcome.verdict.violations.len());
            for v in &outcome.verdict.violations {
                println!("  {v}");
            }
            println!("  replay: cargo run --release -p idem-sim -- --seed {seed} --trace{}", clock_flag(args.kept));
            if !args.keep_going {
                break;
            }
        }
    }
    let took = began.elapsed();
    println!(
        "{ran} seeds from {} in {:.1} s: {:.1} simulated hours, {documented} documented doubles, {failed} failing; faults: {faults:?}",
        args.first,
        took.as_secs_f64(),
        simulated.as_secs_f64() / 3600.0,
    );
    std::process::exit(i32::from(failed > 0));
}

fn clock_flag(kept: Kept) -> &'static str {
    match kept {
        Kept::Database => "",
        Kept::Steady => " --clock steady",
        Kept::Wall => " --clock wall",
    }
}
