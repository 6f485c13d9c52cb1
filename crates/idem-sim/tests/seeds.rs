//! CI's share of the request-lifecycle simulation (docs/testing.md): a fixed range of seeds, every
//! one checked against contract §10; one seed twice is the same run, bit for bit; and the checker
//! catches leases kept on the wall clock (idem-postgres before #40), within the budget. Longer runs:
//! `scripts/simulate.sh --seeds 1000000`.

use idem_sim::clock::Kept;
use idem_sim::{Options, run};

/// Seeds CI runs (about a minute and a quarter on two cores in a debug build, in two halves that
/// run side by side): each of the seven mutants is caught within them. `IDEM_SIM_SEEDS` asks for
/// more or fewer.
fn seeds() -> u64 {
    std::env::var("IDEM_SIM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000)
}

/// Runs `seeds` and fails naming every seed that broke the contract, with its replay.
fn check(seeds: impl Iterator<Item = u64>) {
    let mut failing = Vec::new();
    for seed in seeds {
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
fn the_first_half_of_the_seeds_keeps_the_contract() {
    check(0..seeds() / 2);
}

#[test]
fn the_second_half_of_the_seeds_keeps_the_contract() {
    check(seeds() / 2..seeds());
}

/// The seeds that found a bug (each failed with that bug, or with its fix reverted: the mutants of
/// `crates/idem-sim/mutants`), kept so that none comes back unseen.
const FOUND: &[(u64, &str)] = &[
    (2, "release-broken-body: a key released after its response broke mid-body, and run again"),
    (139, "give-up-unstored: a response the store could not take given up, the key run again"),
    (183, "no-local-hold: a node's own retry took over the key it was still running"),
    (338, "late-lease-refused: a late answer refused though no one had taken the key"),
    (3395, "lease-from-answer: a lease counted from the begin's answer ended under its call"),
    (3931, "extend-shortens: a late extension set a lease's end back"),
    (4176, "client-token-lease-not-renewed: a retried begin got back a lease nearly over"),
];

#[test]
fn the_seeds_that_found_bugs_keep_the_contract() {
    check(FOUND.iter().map(|(seed, _)| *seed));
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
