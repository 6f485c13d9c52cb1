//! Retry schedules are data: a list of waits before attempts 2, 3, …, whose last entry repeats.

use std::time::Duration;

/// The wait after failed attempt `attempt` (1-based) before the next one. A `Retry-After` from
/// the handler is honoured within the schedule's bounds: never sooner than its shortest wait, never
/// later than its longest.
pub fn next_delay(attempt: u32, schedule: &[Duration], retry_after: Option<Duration>) -> Duration {
    let Some(last) = schedule.last() else { return Duration::ZERO };
    let planned = schedule.get(attempt.saturating_sub(1) as usize).unwrap_or(last);
    match retry_after {
        Some(asked) => {
            let shortest = schedule.iter().min().unwrap_or(last);
            let longest = schedule.iter().max().unwrap_or(last);
            asked.clamp(*shortest, *longest)
        }
        None => *planned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: &[u64]) -> Vec<Duration> {
        s.iter().map(|&n| Duration::from_secs(n)).collect()
    }

    #[test]
    fn follows_the_schedule_and_repeats_its_last_wait() {
        let schedule = secs(&[10, 60, 300]);
        let waits: Vec<u64> = (1..=5).map(|a| next_delay(a, &schedule, None).as_secs()).collect();
        assert_eq!(waits, [10, 60, 300, 300, 300]);
    }

    #[test]
    fn retry_after_is_honoured_within_bounds() {
        let schedule = secs(&[10, 60, 300]);
        assert_eq!(next_delay(1, &schedule, Some(Duration::from_secs(120))), Duration::from_secs(120));
        assert_eq!(next_delay(1, &schedule, Some(Duration::from_secs(1))), Duration::from_secs(10), "not sooner");
        assert_eq!(next_delay(1, &schedule, Some(Duration::from_secs(86_400))), Duration::from_secs(300), "not later");
        assert_eq!(next_delay(1, &[], None), Duration::ZERO);
    }
}
