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
}

#[derive(Debug, Serialize)]
pub struct Ratio {
    pub row: String,
    pub to: String,
    pub ratio: f64,
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
        Self { scenario, rows, anchors, ratios, skipped: Vec::new(), memory: None, notes: Vec::new() }
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
        println!("\n## {}", self.scenario);
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
            println!("  {} / {}: {:.2}x", r.row, r.to, r.ratio);
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
    fn a_rate_without_latencies_serializes_them_as_null() {
        let json = serde_json::to_value(Measured::throughput("delivery", 10.0, 100)).unwrap();
        assert!(json["p99_ms"].is_null());
        assert_eq!(json["total"], 100);
    }
}
