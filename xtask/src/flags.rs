//! Every task and flag of `cargo xtask`, declared once (clap); `--help`
//! is generated from these declarations.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Project automation for omnidev.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
pub struct Xtask {
    /// The task.
    #[command(subcommand)]
    pub task: Task,
}

/// The tasks.
#[derive(Debug, Subcommand)]
pub enum Task {
    /// Install what the machine lacks (or only check, --no-install), fmt
    /// check, clippy -D warnings (for Linux and the two macOS targets),
    /// cargo test --workspace, then the e2e.
    Ci(Ci),
    /// Only the macOS step of `ci`: clippy -D warnings of the workspace for
    /// aarch64-apple-darwin (installing its tools when missing, unless
    /// --no-install).
    #[command(name = "check-macos")]
    CheckMacos(CheckMacos),
    /// Build omnidev and run the end-to-end cases.
    #[command(name = "test-e2e")]
    TestE2e(TestE2e),
    /// Release build packed as target/dist/omnidev-<version>-<target>.tar.gz + .sha256.
    Dist(Dist),
    /// Every benchmark, each figure beside its reference from the same run.
    Bench(Bench),
    /// Run a pod on examples/omnigent-example.
    Demo(Demo),
    /// The workspace tests and the e2e cases N times with a busy loop per
    /// core beside them; reports every test that failed at least once.
    Stress(Stress),
}

/// Flags of `cargo xtask stress`.
#[derive(Debug, Args)]
pub struct Stress {
    /// How many times to run the tests (and the e2e cases).
    #[arg(default_value_t = 10)]
    pub runs: usize,
    /// Busy loops beside the tests (default: one per core).
    #[arg(long)]
    pub hogs: Option<usize>,
    /// Only the workspace tests.
    #[arg(long)]
    pub skip_e2e: bool,
    /// Only these crates' tests (`cargo test -p`; implies --skip-e2e).
    #[arg(short = 'p', long = "package", value_name = "CRATE")]
    pub packages: Vec<String>,
    /// The most one run may take, in seconds; a run past it is killed
    /// (with every process below it) and reported.
    #[arg(long, default_value_t = 1800)]
    pub run_timeout: u64,
}

/// Flags of `cargo xtask ci`.
#[derive(Debug, Default, Args)]
#[allow(clippy::struct_excessive_bools, reason = "each is a command-line switch of its own")]
pub struct Ci {
    /// Print the steps instead of running them.
    #[arg(long)]
    pub dry_run: bool,
    /// Stop after the unit and integration tests.
    #[arg(long)]
    pub skip_e2e: bool,
    /// Only check that the prerequisites are on PATH; install nothing.
    #[arg(long, conflicts_with = "install_only")]
    pub no_install: bool,
    /// Install what the machine lacks, then stop (sets up a machine for
    /// development without running the steps).
    #[arg(long)]
    pub install_only: bool,
    /// After the steps, run the tests and e2e cases N times under load
    /// (as `cargo xtask stress N`).
    #[arg(long, value_name = "N")]
    pub stress: Option<usize>,
}

/// Flags of `cargo xtask check-macos`.
#[derive(Debug, Default, Args)]
pub struct CheckMacos {
    /// Print what would be installed and run instead of doing it.
    #[arg(long)]
    pub dry_run: bool,
    /// Install nothing: say what is missing and how to get it.
    #[arg(long)]
    pub no_install: bool,
}

/// Flags of `cargo xtask test-e2e`.
#[derive(Debug, Default, Args)]
pub struct TestE2e {
    /// Run only the cases whose name contains one of these.
    #[arg(value_name = "FILTER")]
    pub filters: Vec<String>,
    /// Print the case names and exit.
    #[arg(long)]
    pub list: bool,
    /// Keep the temp directories of the run.
    #[arg(long)]
    pub keep: bool,
    /// Test this binary instead of building target/debug/omnidev.
    #[arg(long, value_name = "PATH")]
    pub omnidev: Option<PathBuf>,
    /// Cases run at once.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub jobs: usize,
}

/// Flags of `cargo xtask dist`.
#[derive(Debug, Args)]
pub struct Dist {
    /// Cargo profile to build with (`release` for users).
    #[arg(long, value_name = "NAME", default_value = "release")]
    pub profile: String,
    /// Print what would be built and written instead of doing it.
    #[arg(long)]
    pub dry_run: bool,
}

/// Flags of `cargo xtask bench`.
#[derive(Debug, Default, Args)]
pub struct Bench {
    /// Only the benchmarks whose name contains one of these.
    #[arg(value_name = "FILTER")]
    pub filters: Vec<String>,
    /// Benchmark this binary instead of building target/release/omnidev.
    #[arg(long, value_name = "PATH")]
    pub omnidev: Option<PathBuf>,
    /// One JSON object per benchmark instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The new-worktree row takes fresh `git worktree`s of this checkout
    /// (a real Omnigent, say) instead of copies of examples/omnigent-example.
    #[arg(long, value_name = "DIR")]
    pub checkout: Option<PathBuf>,
    /// Runs of each case of the new-worktree row (full stack, backend
    /// path, UI path alone), the order rotating.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub rounds: u32,
    /// Edits of each side of the reload-beside-watchexec row, alternating.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(4..=500))]
    pub edits: u32,
}

/// Flags of `cargo xtask demo`.
#[derive(Debug, Default, Args)]
pub struct Demo {
    /// Print the commands instead of running them.
    #[arg(long)]
    pub dry_run: bool,
    /// Arguments for `omnidev up` (e.g. --headless).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    pub up_args: Vec<String>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn flags_are_consistent_and_parse() {
        Xtask::command().debug_assert();
        let parsed = Xtask::try_parse_from(["xtask", "test-e2e", "tui", "--keep"]).expect("parse");
        let Task::TestE2e(e2e) = parsed.task else {
            panic!("expected test-e2e");
        };
        assert_eq!(e2e.filters, ["tui"]);
        assert!(e2e.keep);
        let parsed =
            Xtask::try_parse_from(["xtask", "demo", "--dry-run", "--headless"]).expect("parse");
        let Task::Demo(demo) = parsed.task else {
            panic!("expected demo");
        };
        assert!(demo.dry_run);
        assert_eq!(demo.up_args, ["--headless"]);
        assert!(Xtask::try_parse_from(["xtask", "dist", "--bogus"]).is_err());
    }
}
