//! `cargo bench -p omnidev-core`: runs the `log_throughput` example in
//! release mode and prints its figures beside the targets (at most 1.5x the
//! raw `cat > file` time, at most 30 MiB peak RSS).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::Command;

fn main() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["run", "--quiet", "--release", "-p", "omnidev-core", "--example", "log_throughput"])
        .output();
    match output {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            println!("{}", text.trim());
            println!("targets: ratio <= 1.50, max_rss_mib <= 30");
        }
        Ok(out) => eprintln!("log_throughput failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => eprintln!("could not run cargo: {e}"),
    }
}
