//! The `idem` binary: parse the command line and hand over to the server library.

use std::process::ExitCode;

use clap::Parser;
use idem_server::cli::{Cli, dispatch};

/// mimalloc rather than glibc's malloc: every request allocates and frees small buffers on two
/// threads, and glibc's allocator took a sixth of idem's CPU under load (malloc, free and their
/// consolidation, measured with perf during `idem-bench claims`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idem: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("idem: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}
