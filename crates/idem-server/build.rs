//! Records which commit the binary was built from, for `idem --version`: `IDEM_COMMIT` (the short
//! hash) and `IDEM_COMMIT_DATE` (the commit's date, not the build's, so that building one commit
//! twice gives the same text). `scripts/release.sh` sets both through the environment; otherwise
//! they come from `git`, and outside a git checkout (a source tarball, a vendored crate) they are
//! `unknown`. Never fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=IDEM_BUILD_COMMIT");
    println!("cargo:rerun-if-env-changed=IDEM_BUILD_DATE");
    let commit = given("IDEM_BUILD_COMMIT").or_else(|| git(&["rev-parse", "--short=7", "HEAD"]));
    let date = given("IDEM_BUILD_DATE").or_else(|| git(&["show", "-s", "--format=%cs", "HEAD"]));
    println!("cargo:rustc-env=IDEM_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    println!("cargo:rustc-env=IDEM_COMMIT_DATE={}", date.as_deref().unwrap_or("unknown"));
    for file in git_files_to_watch() {
        println!("cargo:rerun-if-changed={}", file.display());
    }
}

fn given(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// One line of `git`'s output, or nothing when git is missing or this is no checkout.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let line = text.trim();
    (output.status.success() && !line.is_empty()).then(|| line.to_owned())
}

/// HEAD, the branch it names and the packed refs: a new commit changes one of them, and the
/// version is read again. Only files that exist (cargo reruns the script every time for one that
/// does not).
fn git_files_to_watch() -> Vec<PathBuf> {
    let (Some(dir), Some(common)) = (git(&["rev-parse", "--git-dir"]), git(&["rev-parse", "--git-common-dir"])) else {
        return Vec::new();
    };
    let (dir, common) = (PathBuf::from(dir), PathBuf::from(common));
    let mut files = vec![dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        files.push(common.join(branch));
    }
    files.into_iter().filter(|f| Path::new(f).is_file()).collect()
}
