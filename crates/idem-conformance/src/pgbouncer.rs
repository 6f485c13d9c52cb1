//! A PgBouncer of a test's own in front of the test database, to run idem through a pooler:
//! Debian's `pgbouncer` (1.18 in Debian 12, which keeps no prepared statement across server
//! connections) on a free port, with its config in a temporary directory, stopped when dropped.
//! It pools one database, `idem`, whose server connections start in the test's schema (PgBouncer
//! 1.18 refuses the `options` startup parameter that a schema is otherwise chosen by). Without
//! `pgbouncer` installed, [`PgBouncer::start`] says loudly that the test did not run.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The server PgBouncer pools connections to.
#[derive(Debug, Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub dbname: String,
    /// The schema every server connection starts in (`SET search_path`, PgBouncer's
    /// `connect_query`).
    pub schema: Option<String>,
}

/// A running PgBouncer; killed when dropped.
pub struct PgBouncer {
    child: Child,
    port: u16,
    user: String,
    _dir: tempfile::TempDir,
}

/// Where Debian installs it (`/usr/sbin` is not on every user's `PATH`), else the `PATH`'s.
fn binary() -> Option<PathBuf> {
    let sbin = PathBuf::from("/usr/sbin/pgbouncer");
    if sbin.exists() {
        return Some(sbin);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("pgbouncer")).find(|p| p.exists())
}

/// PgBouncer refuses to run as root; as root it is told to become `nobody`.
fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

impl PgBouncer {
    /// Starts PgBouncer in `pool_mode` (`transaction`, `session`) in front of `target`, with
    /// `extra` settings (`("server_round_robin", "1")`), and waits until it says it is up. `None`
    /// (said loudly, for `test`) when PgBouncer is not installed.
    pub fn start(target: &Target, pool_mode: &str, extra: &[(&str, &str)], test: &str) -> Option<Self> {
        let Some(binary) = binary() else {
            crate::skipped(&format!(
                "pgbouncer is not installed (apt-get install pgbouncer): {test} did not run through PgBouncer"
            ));
            return None;
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let config = dir.path().join("pgbouncer.ini");
        std::fs::write(&config, ini(target, pool_mode, extra, port, &dir.path().join("users.txt"))).expect("ini");
        std::fs::write(dir.path().join("users.txt"), format!("\"{}\" \"\"\n", target.user)).expect("users");
        let mut command = Command::new(binary);
        if running_as_root() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
            command.args(["-u", "nobody"]);
        }
        let mut child = command.arg(&config).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        // Reads its log for as long as it runs, so that the pipe never fills.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let bouncer = Self { child, port, user: target.user.clone(), _dir: dir };
        bouncer.wait_until_up(&rx);
        Some(bouncer)
    }

    fn wait_until_up(&self, log: &mpsc::Receiver<String>) {
        let mut seen = Vec::new();
        while let Ok(line) = log.recv_timeout(Duration::from_secs(10)) {
            if line.contains("process up") {
                return;
            }
            seen.push(line);
        }
        panic!("pgbouncer did not start:\n{}", seen.join("\n"));
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL to the pooled database.
    pub fn url(&self) -> String {
        format!("postgres://{}@127.0.0.1:{}/idem", self.user, self.port)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ini(target: &Target, pool_mode: &str, extra: &[(&str, &str)], port: u16, users: &std::path::Path) -> String {
    let mut database =
        format!("host={} port={} dbname={} user={}", target.host, target.port, target.dbname, target.user);
    if let Some(password) = &target.password {
        database.push_str(&format!(" password={password}"));
    }
    if let Some(schema) = &target.schema {
        database.push_str(&format!(" connect_query='SET search_path = {schema}'"));
    }
    // Session mode resets a server connection between clients; the default, DISCARD ALL, would
    // reset the schema too. Dropping the prepared statements is what matters.
    let reset = "DEALLOCATE ALL";
    let mut ini = format!(
        "[databases]\nidem = {database}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
         unix_socket_dir =\nauth_type = trust\nauth_file = {}\npool_mode = {pool_mode}\n\
         server_reset_query = {reset}\nmax_client_conn = 1000\ndefault_pool_size = 20\n\
         log_connections = 0\nlog_disconnections = 0\n",
        users.display()
    );
    for (key, value) in extra {
        ini.push_str(&format!("{key} = {value}\n"));
    }
    ini
}
