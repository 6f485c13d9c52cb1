//! `idem serve`'s look at the embedded store's data dir before anything starts. A directory this
//! process may not write (a bind mount a container runtime left to root, files left by an idem
//! that ran as another user) is refused with who idem runs as and the ways to give it the
//! directory, rather than with the store's bare `Permission denied` later. Only a definite answer
//! refuses (`EACCES`, `EROFS`); anything else is left for the store to meet and report.

use std::path::{Path, PathBuf};

use rustix::fs::Access;
use rustix::io::Errno;

use super::client::Failure;
use crate::config::{Config, StoreConfig};

/// Who this process runs as: what the directory's owner must be, or its group allow.
pub(super) struct Runner {
    uid: u32,
    gid: u32,
    /// Its name in `/etc/passwd`, when it has one there (a container's uid often has none).
    name: Option<String>,
}

impl Runner {
    fn this() -> Self {
        let uid = rustix::process::geteuid().as_raw();
        Self { uid, gid: rustix::process::getegid().as_raw(), name: user_name(uid) }
    }
}

/// Refuses, in words, an embedded store's data dir that idem may not write: the directory and
/// idem's files directly in it (`idem.*` and `log/`), or, when it is not there yet, the directory
/// it would be made in.
pub(super) fn check(config: &Config) -> Result<(), Failure> {
    if !matches!(config.store, StoreConfig::Embedded {}) {
        return Ok(());
    }
    match unwritable(&config.data_dir) {
        None => Ok(()),
        Some((at, errno)) => Err(Failure::runtime(refusal(&config.data_dir, &at, errno, &Runner::this()))),
    }
}

/// The first path idem would need to change and may not, with why.
fn unwritable(dir: &Path) -> Option<(PathBuf, Errno)> {
    let existing = nearest_existing(dir);
    let mut paths = vec![existing.clone()];
    if existing == dir {
        // idem's own files (`idem.db`, its journal, `idem.lock`) and `log/`; anything else in the
        // directory is not idem's to write.
        let ours = |path: &Path| {
            path == crate::embedded::log_dir(dir)
                || path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("idem."))
        };
        let entries = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|entry| entry.path());
        paths.extend(entries.filter(|path| ours(path)));
    }
    paths.into_iter().find_map(|path| {
        let mode = if path.is_dir() { Access::READ_OK | Access::WRITE_OK | Access::EXEC_OK } else { Access::WRITE_OK };
        match rustix::fs::access(&path, mode) {
            Err(errno) if errno == Errno::ACCESS || errno == Errno::ROFS => Some((path, errno)),
            _ => None,
        }
    })
}

/// `dir` when it is there, else its nearest ancestor that is (`.` for a relative path's).
fn nearest_existing(dir: &Path) -> PathBuf {
    let mut at = dir;
    while !at.exists() {
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => return PathBuf::from("."),
        }
    }
    at.to_owned()
}

/// What `idem serve` says: the path and why, who idem runs as, and the fixes.
fn refusal(dir: &Path, at: &Path, errno: Errno, runner: &Runner) -> String {
    let what = std::io::Error::from(errno);
    let whose = if at == dir { String::new() } else { format!("{}: ", at.display()) };
    let (inside, dir) = (at.starts_with(dir), dir.display());
    if errno == Errno::ROFS {
        return format!("cannot use data dir {dir}: {whose}{what}: give idem a writable directory (or volume) there");
    }
    let (uid, gid) = (runner.uid, runner.gid);
    let name = runner.name.as_ref().map(|n| format!(" ({n})")).unwrap_or_default();
    let own = if inside {
        format!("`chown -R {uid}:{gid} {dir}`")
    } else {
        format!("`mkdir -p {dir} && chown {uid}:{gid} {dir}` as a user who may")
    };
    format!(
        "cannot use data dir {dir}: {whose}{what}. idem runs as uid {uid}{name}, gid {gid}, which may not write \
         there. Give it the directory: {own}; or, in a container, have the runtime do it: Podman's `:U` volume \
         option (`-v /srv/idem-data:{dir}:U`), or in Kubernetes the pod's `securityContext.fsGroup: {gid}`"
    )
}

/// The name `/etc/passwd` gives `uid`.
fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse() == Ok(uid)).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idem_user() -> Runner {
        Runner { uid: 10001, gid: 10001, name: Some("idem".into()) }
    }

    #[test]
    fn a_refusal_names_the_user_and_the_fixes() {
        let said = refusal(Path::new("/data"), Path::new("/data"), Errno::ACCESS, &idem_user());
        assert!(said.starts_with("cannot use data dir /data: Permission denied"), "{said}");
        for part in ["uid 10001 (idem), gid 10001", "`chown -R 10001:10001 /data`", "/data:U`", "fsGroup: 10001"] {
            assert!(said.contains(part), "{part} in {said}");
        }
        let inside = refusal(Path::new("/data"), Path::new("/data/idem.db"), Errno::ACCESS, &idem_user());
        assert!(inside.contains("/data: /data/idem.db: Permission denied") && inside.contains("chown -R"), "{inside}");
        let unnamed = Runner { name: None, ..idem_user() };
        let new = refusal(Path::new("/srv/idem"), Path::new("/srv"), Errno::ACCESS, &unnamed);
        assert!(new.contains("uid 10001, gid") && new.contains("`mkdir -p /srv/idem && chown 10001:10001"), "{new}");
        let read_only = refusal(Path::new("/data"), Path::new("/data"), Errno::ROFS, &idem_user());
        assert!(read_only.contains("Read-only file system") && !read_only.contains("chown"), "{read_only}");
    }

    #[test]
    fn a_directory_not_there_yet_is_judged_by_where_it_would_be_made() {
        let dir = tempfile::tempdir().expect("temp dir");
        let new = dir.path().join("a/b");
        assert_eq!(nearest_existing(&new), dir.path());
        assert_eq!(nearest_existing(Path::new("no-such-dir-here/x")), Path::new("."));
        assert!(unwritable(&new).is_none(), "a temp dir is ours to write");
    }

    #[test]
    fn only_idems_own_files_are_judged() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let read_only = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, "").expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
            path
        };
        read_only("README");
        assert!(unwritable(dir.path()).is_none(), "not idem's: never judged");
        let db = read_only("idem.db");
        if rustix::process::geteuid().is_root() {
            return; // root writes a file of mode 0444 all the same
        }
        assert_eq!(unwritable(dir.path()), Some((db, Errno::ACCESS)));
    }

    #[test]
    fn the_user_is_found_by_uid() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(user_name(u32::MAX - 7), None);
    }
}
