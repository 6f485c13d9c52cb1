//! Runs the real `idem` binary as a child process, for what only a process shows: signals,
//! kill -9, refusal to start, and the CLI. Readiness is the "idem listening" log line, not a sleep.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_idem");

pub struct Idem {
    pub child: Child,
    pub url: String,
    pub log: mpsc::Receiver<String>,
    /// What it logged before it was listening.
    pub started: Vec<String>,
}

/// A port that was free a moment ago (the child binds it itself).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

impl Idem {
    /// Starts `idem serve` on `data_dir` and waits until it logs that it is listening.
    pub fn serve(data_dir: &Path, extra: &[&str]) -> Idem {
        Self::serve_with(data_dir, extra, &[], None)
    }

    /// As [`Idem::serve`], with extra environment variables and, when given, the open-file limit
    /// the process starts with (soft and hard, as `ulimit -n` sets them).
    pub fn serve_with(data_dir: &Path, extra: &[&str], env: &[(&str, &str)], nofile: Option<u32>) -> Idem {
        Self::serve_until_logged(data_dir, extra, env, nofile, "idem listening")
    }

    /// As [`Idem::serve_with`], waiting for a log line containing `needle` instead.
    pub fn serve_until_logged(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        nofile: Option<u32>,
        needle: &str,
    ) -> Idem {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut command = match nofile {
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\""), BIN]);
                sh
            }
            None => Command::new(BIN),
        };
        let mut child = command
            .envs(env.iter().copied())
            .args(["serve", "--listen", &listen, "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env("IDEM_LOG__FORMAT", "text")
            .env_remove("IDEM_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn idem");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut idem = Idem { child, url: format!("http://{listen}"), log, started: Vec::new() };
        idem.started = idem.log_until(needle, Duration::from_secs(20));
        idem
    }

    /// Waits for a log line containing `needle`; panics with what was logged if it never comes.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        self.log_until(needle, timeout).pop().unwrap_or_default()
    }

    /// The log lines up to and with the first containing `needle`; panics with what was logged
    /// if it never comes.
    fn log_until(&self, needle: &str, timeout: Duration) -> Vec<String> {
        let deadline = std::time::Instant::now() + timeout;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.log.recv_timeout(left) {
                Ok(line) if line.contains(needle) => {
                    seen.push(line);
                    return seen;
                }
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        panic!("idem never logged {needle:?}; it logged:\n{}", seen.join("\n"));
    }

    pub fn kill9(&mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("kill -TERM");
        assert!(sent.success());
        self.child.wait().expect("wait")
    }
}

impl Drop for Idem {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary to completion: (exit code, stdout, stderr).
pub fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let output =
        Command::new(BIN).args(args).envs(env.iter().copied()).stdin(Stdio::null()).output().expect("run idem");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
