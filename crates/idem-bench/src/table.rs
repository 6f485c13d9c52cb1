//! A scenario's results: idem's rows, its anchors' rows, the ratios between them, and what the idem
//! process held in memory. Printed as a table and serialized into `--json`.

use serde::Serialize;

use crate::load::Measured;

#[derive(Debug, Serialize)]
pub struct Table {
    pub scenario: &'static str,
    /// What was measured for idem.
    pub rows: Vec<Measured>,
    /// What gives those figures meaning, measured in the same run.
    pub anchors: Vec<Measured>,
    /// Items per second of a row divided by those of an anchor (or of another row).
    pub ratios: Vec<Ratio>,
    /// Anchors that could not be measured here, and why.
    pub skipped: Vec<String>,
    pub memory: Option<Memory>,
    /// Other findings of the scenario, as sentences (memory per claim, restart time).
    pub notes: Vec<String>,
    /// How many runs of the scenario this table sums up (`--rounds`).
    pub rounds: usize,
    /// Latency a row adds over an anchor measured at the same rate.
    pub added: Vec<Added>,
}

/// The latency a row adds over an anchor at the same open-loop rate: the differences of their
/// percentiles (with several rounds, the medians of the rounds' differences and their ranges).
#[derive(Debug, Clone, Serialize)]
pub struct Added {
    pub row: String,
    pub to: String,
    pub p50_ms: f64,
    pub p99_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_range: Option<(f64, f64)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_range: Option<(f64, f64)>,
}

impl Added {
    pub fn of(row: &Measured, to: &Measured) -> Self {
        Self {
            row: row.name.clone(),
            to: to.name.clone(),
            p50_ms: row.p50_ms - to.p50_ms,
            p99_ms: row.p99_ms - to.p99_ms,
            p50_range: None,
            p99_range: None,
        }
    }

    /// The medians of several rounds' differences, with their ranges.
    fn combine(all: &[&Added]) -> Self {
        let median = |pick: fn(&Added) -> f64| {
            let mut v: Vec<f64> = all.iter().map(|a| pick(a)).collect();
            v.sort_by(f64::total_cmp);
            (v[(v.len() - 1) / 2], (v[0], v[v.len() - 1]))
        };
        let ((p50_ms, p50), (p99_ms, p99)) = (median(|a| a.p50_ms), median(|a| a.p99_ms));
        Self { p50_ms, p99_ms, p50_range: Some(p50), p99_range: Some(p99), ..all[0].clone() }
    }
}

#[derive(Debug, Serialize)]
pub struct Ratio {
    pub row: String,
    pub to: String,
    /// With several rounds, the median of the rounds' ratios.
    pub ratio: f64,
    /// With several rounds, the lowest and highest of the rounds' ratios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<(f64, f64)>,
}

/// The idem process's memory over a scenario, from `/proc/PID`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Memory {
    /// The kernel's peak resident set (VmHWM). It counts the memory-mapped database once per
    /// mapping, and every SQLite connection maps it: with a large database it overstates.
    pub peak_rss_mib: f64,
    /// Peak proportional set size, sampled every five seconds and at the end: heap plus mapped database pages, each
    /// page counted once. What the process costs the machine.
    pub peak_pss_mib: f64,
    /// Peak anonymous memory (RssAnon), sampled each second: the heap.
    pub peak_heap_mib: f64,
}

impl Table {
    /// A table whose ratios compare every row with every anchor.
    pub fn new(scenario: &'static str, rows: Vec<Measured>, anchors: Vec<Measured>) -> Self {
        let ratios = rows.iter().flat_map(|r| anchors.iter().map(move |a| Ratio::of(r, a))).collect();
        Self {
            scenario,
            rows,
            anchors,
            ratios,
            skipped: Vec::new(),
            memory: None,
            notes: Vec::new(),
            rounds: 1,
            added: Vec::new(),
        }
    }

    /// A table of latencies at fixed rates: each pair a row and its anchor at the same rate, the
    /// latency the row adds over its anchor; no throughput ratios (at a fixed rate they say nothing).
    pub fn latency(scenario: &'static str, pairs: Vec<(Measured, Measured)>) -> Self {
        let added = pairs.iter().map(|(row, anchor)| Added::of(row, anchor)).collect();
        let (rows, anchors) = pairs.into_iter().unzip();
        Self { ratios: Vec::new(), added, ..Self::new(scenario, rows, anchors) }
    }

    /// Several rounds of one scenario as one table. Each row and anchor is the round with the
    /// median items per second (so that its latencies belong to one measurement); each ratio is the
    /// median of the rounds' own ratios, each taken between measurements a minute apart, with their
    /// range. A ratio from one round can be off by as much as this machine drifts between two
    /// minutes; the median of several is what to quote.
    pub fn combine(mut rounds: Vec<Table>) -> Option<Table> {
        if rounds.len() <= 1 {
            return rounds.pop();
        }
        let n = rounds.len();
        let median_of = |pick: &dyn Fn(&Table) -> Option<&Measured>| -> Option<Measured> {
            let mut all: Vec<&Measured> = rounds.iter().filter_map(pick).collect();
            all.sort_by(|a, b| a.items_per_sec().total_cmp(&b.items_per_sec()));
            all.get(all.len().saturating_sub(1) / 2).map(|m| (*m).clone())
        };
        let first = &rounds[0];
        let rows = first
            .rows
            .iter()
            .filter_map(|r| median_of(&|t: &Table| t.rows.iter().find(|m| m.name == r.name)))
            .collect();
        let anchors = first
            .anchors
            .iter()
            .filter_map(|a| median_of(&|t: &Table| t.anchors.iter().find(|m| m.name == a.name)))
            .collect();
        let ratios = first
            .ratios
            .iter()
            .map(|r| {
                let mut all: Vec<f64> = rounds
                    .iter()
                    .filter_map(|t| t.ratios.iter().find(|x| x.row == r.row && x.to == r.to))
                    .map(|x| x.ratio)
                    .collect();
                all.sort_by(f64::total_cmp);
                Ratio {
                    row: r.row.clone(),
                    to: r.to.clone(),
                    ratio: all[(all.len() - 1) / 2],
                    range: Some((all[0], all[all.len() - 1])),
                }
            })
            .collect();
        let memory = rounds.iter().filter_map(|t| t.memory).reduce(|a, b| Memory {
            peak_rss_mib: a.peak_rss_mib.max(b.peak_rss_mib),
            peak_pss_mib: a.peak_pss_mib.max(b.peak_pss_mib),
            peak_heap_mib: a.peak_heap_mib.max(b.peak_heap_mib),
        });
        let notes = rounds
            .iter()
            .enumerate()
            .flat_map(|(i, t)| t.notes.iter().map(move |note| format!("round {}: {note}", i + 1)))
            .collect();
        let added = first
            .added
            .iter()
            .map(|a| {
                let all: Vec<&Added> =
                    rounds.iter().filter_map(|t| t.added.iter().find(|x| x.row == a.row && x.to == a.to)).collect();
                Added::combine(&all)
            })
            .collect();
        Some(Table {
            scenario: first.scenario,
            added,
            rows,
            anchors,
            ratios,
            skipped: first.skipped.clone(),
            memory,
            notes,
            rounds: n,
        })
    }

    pub fn skipped(mut self, skipped: Vec<String>) -> Self {
        self.skipped = skipped;
        self
    }

    pub fn memory(mut self, memory: Option<Memory>) -> Self {
        self.memory = memory;
        self
    }

    pub fn print(&self) {
        match self.rounds {
            1 => println!("\n## {}", self.scenario),
            n => println!("\n## {} (each row: the median of {n} rounds)", self.scenario),
        }
        println!(
            "{:<46} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8} {:>6}",
            "", "ops/s", "items/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors"
        );
        let ms = |v: f64| if v.is_nan() { "-".to_owned() } else { format!("{v:.2}") };
        for m in self.rows.iter().chain(&self.anchors) {
            println!(
                "{:<46} {:>10.0} {:>10.0} {:>8} {:>8} {:>8} {:>8} {:>6}",
                m.name,
                m.ops_per_sec,
                m.items_per_sec(),
                ms(m.p50_ms),
                ms(m.p90_ms),
                ms(m.p99_ms),
                ms(m.max_ms),
                m.errors
            );
        }
        for r in &self.ratios {
            match r.range {
                None => println!("  {} / {}: {:.2}x", r.row, r.to, r.ratio),
                Some((low, high)) => println!(
                    "  {} / {}: {:.2}x, median of {} rounds ({low:.2}x to {high:.2}x)",
                    r.row, r.to, r.ratio, self.rounds
                ),
            }
        }
        for a in &self.added {
            println!("  {} adds over {}: p50 {:+.2} ms, p99 {:+.2} ms", a.row, a.to, a.p50_ms, a.p99_ms);
            if let (Some((l50, h50)), Some((l99, h99))) = (a.p50_range, a.p99_range) {
                println!(
                    "    medians of {} rounds (p50 {l50:+.2} to {h50:+.2} ms, p99 {l99:+.2} to {h99:+.2} ms)",
                    self.rounds
                );
            }
        }
        for note in &self.skipped {
            println!("  (skipped: {note})");
        }
        for note in &self.notes {
            println!("  {note}");
        }
        if let Some(m) = self.memory {
            println!(
                "  idem memory, peaks: heap {:.0} MiB; PSS {:.0} MiB (heap + mapped database pages); \
                 RSS {:.0} MiB (VmHWM: counts mapped pages once per connection)",
                m.peak_heap_mib, m.peak_pss_mib, m.peak_rss_mib
            );
        }
    }
}

impl Ratio {
    pub fn of(row: &Measured, to: &Measured) -> Self {
        Self {
            row: row.name.clone(),
            to: to.name.clone(),
            ratio: row.items_per_sec() / to.items_per_sec().max(f64::MIN_POSITIVE),
            range: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(name: &str, ops_per_sec: f64, per_op: u64) -> Measured {
        Measured { per_op, ..Measured::throughput(name, ops_per_sec, 0) }
    }

    #[test]
    fn ratios_compare_items_per_second_of_every_row_with_every_anchor() {
        let table = Table::new(
            "t",
            vec![measured("batches", 100.0, 500), measured("singles", 20_000.0, 1)],
            vec![measured("redis", 100_000.0, 1)],
        );
        let ratios: Vec<(&str, &str, f64)> =
            table.ratios.iter().map(|r| (r.row.as_str(), r.to.as_str(), r.ratio)).collect();
        assert_eq!(ratios, vec![("batches", "redis", 0.5), ("singles", "redis", 0.2)]);
    }

    #[test]
    fn rounds_combine_into_medians_with_the_range_of_their_ratios() {
        let round =
            |idem: f64, redis: f64| Table::new("t", vec![measured("idem", idem, 1)], vec![measured("redis", redis, 1)]);
        let table = Table::combine(vec![round(60.0, 100.0), round(90.0, 100.0), round(70.0, 70.0)]).unwrap();
        assert_eq!(table.rounds, 3);
        assert_eq!((table.rows[0].ops_per_sec, table.anchors[0].ops_per_sec), (70.0, 100.0));
        let r = &table.ratios[0];
        assert_eq!((r.ratio, r.range), (0.9, Some((0.6, 1.0))), "the median of the rounds' own ratios");
        let one = Table::combine(vec![round(1.0, 2.0)]).unwrap();
        assert_eq!((one.rounds, one.ratios[0].range), (1, None));
    }

    #[test]
    fn latencies_are_added_over_each_rows_own_anchor_and_combined_as_medians() {
        let at = |name: &str, p50: f64, p99: f64| Measured { p50_ms: p50, p99_ms: p99, ..measured(name, 10.0, 1) };
        let round = |extra: f64| {
            Table::latency(
                "t",
                vec![
                    (at("idem fast", 1.0 + extra, 3.0), at("up fast", 0.5, 1.0)),
                    (at("idem slow", 2.0, 4.0), at("up slow", 1.0, 1.5)),
                ],
            )
        };
        let one = round(0.0);
        assert!(one.ratios.is_empty(), "no throughput ratios at a fixed rate");
        let added: Vec<(&str, &str, f64, f64)> =
            one.added.iter().map(|a| (a.row.as_str(), a.to.as_str(), a.p50_ms, a.p99_ms)).collect();
        assert_eq!(added, vec![("idem fast", "up fast", 0.5, 2.0), ("idem slow", "up slow", 1.0, 2.5)]);
        let table = Table::combine(vec![round(0.0), round(2.0), round(1.0)]).unwrap();
        assert_eq!((table.added[0].p50_ms, table.added[0].p50_range), (1.5, Some((0.5, 2.5))));
    }

    #[test]
    fn a_rate_without_latencies_serializes_them_as_null() {
        let json = serde_json::to_value(Measured::throughput("delivery", 10.0, 100)).unwrap();
        assert!(json["p99_ms"].is_null());
        assert_eq!(json["total"], 100);
    }
}
