//! CI's share of the request-lifecycle simulation (docs/testing.md): a fixed range of seeds, every
//! one checked against contract §10; one seed twice is the same run, bit for bit; and the checker
//! catches leases kept on the wall clock (idem-postgres before #40), within the budget. Longer runs:
//! `scripts/simulate.sh --seeds 1000000`.

use idem_sim::clock::Kept;
use idem_sim::{Options, run};

/// Seeds CI runs (about a minute in a debug build); `IDEM_SIM_SEEDS` asks for more or fewer.
fn seeds() -> u64 {
    std::env::var("IDEM_SIM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000)
}

#[test]
fn every_seed_keeps_the_contract() {
    let mut failing = Vec::new();
    for seed in 0..seeds() {
        let outcome = run(seed, Options::default());
        if !outcome.verdict.violations.is_empty() {
            failing.push(format!(
                "seed {seed}:\n  {}\n  replay: scripts/simulate.sh --seed {seed} --trace",
                outcome.verdict.violations.join("\n  ")
            ));
        }
    }
    assert!(failing.is_empty(), "{}", failing.join("\n"));
}

#[test]
fn one_seed_is_one_run() {
    for seed in [1, 172, 914, 11_281] {
        let (a, b) = (run(seed, Options::default()), run(seed, Options::default()));
        assert_eq!(a.digest, b.digest, "seed {seed} ran two ways");
        assert!(a.stats.attempts > 0, "seed {seed} did something");
    }
    assert_ne!(run(1, Options::default()).digest, run(2, Options::default()).digest);
}

#[test]
fn leases_kept_on_the_wall_clock_are_caught() {
    let options = Options { kept: Kept::Wall, ..Options::default() };
    let caught = (0..1_500).find(|seed| !run(*seed, options).verdict.violations.is_empty());
    let seed = caught.expect("a wall-clock step handing a running key over, within 1,500 seeds");
    let outcome = run(seed, options);
    assert!(
        outcome.stats.faults.contains(&"clock step"),
        "seed {seed} was caught for a clock step: {:?}",
        outcome.stats
    );
}
