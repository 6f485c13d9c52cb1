//! `--pin`: the load generator on one core, what it measures on the others. On two shared cores
//! an unpinned run lets the generator and the system under test take each other's time in ways
//! that differ between idem and its anchors (Redis is one thread, idem several); pinned, each
//! side has a core of its own, and every anchor gets the same treatment as idem.
//!
//! Pinning uses `taskset` (util-linux): this process and its threads (the load generator) go on
//! the first core; every process it starts (idem, the built-in upstream, Redis) is started under
//! `taskset` on the rest; the running PostgreSQL's postmaster and backends are moved there for the
//! run and given back every core afterwards.

use std::process::Command;
use std::sync::OnceLock;

/// The cores of the system under test, as `taskset -c` takes them ("1", "1-3"), when pinning.
static SERVER_CORES: OnceLock<String> = OnceLock::new();

/// Pins this process (all its threads) to core 0 and notes where everything else goes. Fails
/// on a single-core machine or without `taskset`.
pub fn enable() -> Result<(), String> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if cores < 2 {
        return Err(format!("--pin needs two cores or more; this process may use {cores}"));
    }
    let server = if cores == 2 { "1".to_owned() } else { format!("1-{}", cores - 1) };
    taskset(&["-a", "-p", "-c", "0", &std::process::id().to_string()])?;
    let _ = SERVER_CORES.set(server);
    Ok(())
}

/// A command for `program`, started on the system under test's cores when pinning.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    match SERVER_CORES.get() {
        Some(cores) => {
            let mut command = Command::new("taskset");
            command.args(["-c", cores]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// The running PostgreSQL (postmaster and backends) on the system under test's cores; the
/// returned guard gives them every core back when dropped.
pub fn postgres(data_directory: &str) -> Result<PostgresPinned, String> {
    let cores = SERVER_CORES.get().ok_or("not pinning")?;
    let pid_file = std::path::Path::new(data_directory).join("postmaster.pid");
    let text = std::fs::read_to_string(&pid_file).map_err(|e| format!("{}: {e}", pid_file.display()))?;
    let postmaster = text.lines().next().unwrap_or_default().trim().to_owned();
    postmaster.parse::<u32>().map_err(|_| format!("{}: no pid on its first line", pid_file.display()))?;
    let pinned = PostgresPinned { postmaster };
    pinned.set(cores)?;
    Ok(pinned)
}

pub struct PostgresPinned {
    postmaster: String,
}

impl PostgresPinned {
    /// The postmaster and each of its children (backends forked later inherit the postmaster's).
    fn set(&self, cores: &str) -> Result<(), String> {
        let children = Command::new("pgrep").args(["-P", &self.postmaster]).output().map_err(|e| e.to_string())?;
        let children = String::from_utf8_lossy(&children.stdout).into_owned();
        for pid in std::iter::once(self.postmaster.as_str()).chain(children.split_whitespace()) {
            taskset(&["-a", "-p", "-c", cores, pid])?;
        }
        Ok(())
    }
}

impl Drop for PostgresPinned {
    fn drop(&mut self) {
        let all = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        // This process is pinned to core 0, so available_parallelism says 1: ask the kernel.
        let all = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .map(|s| s.trim().to_owned())
            .unwrap_or(if all > 1 { format!("0-{}", all - 1) } else { "0".to_owned() });
        if let Err(e) = self.set(&all) {
            eprintln!("idem-bench: could not give PostgreSQL its cores back ({e}): taskset -a -p -c {all} <pid>");
        }
    }
}

fn taskset(args: &[&str]) -> Result<(), String> {
    let out = Command::new("taskset").args(args).output().map_err(|e| format!("taskset: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("taskset {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}
