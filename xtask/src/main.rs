//! Project automation: `cargo xtask ci | test-e2e | dist | bench | demo`.

mod bench;
mod ci;
mod demo;
mod dist;
mod e2e;
mod prereqs;
mod util;

use anyhow::{Result, bail};

const USAGE: &str = "\
usage: cargo xtask <task> [options]

tasks:
  ci                    prerequisites check (tools on PATH), fmt check, clippy -D warnings, cargo test --workspace, then the e2e
      --skip-e2e          stop after the unit and integration tests
  test-e2e [FILTER...]  build omnidev and run the end-to-end cases (names containing a FILTER)
      --list              print the case names and exit
      --keep              keep the temp directories of the run
      --omnidev PATH      test this binary instead of building target/debug/omnidev
  dist                  release build packed as target/dist/omnidev-<version>-<target>.tar.gz + .sha256
      --profile NAME      cargo profile to build with (default: release)
  bench                 every benchmark, each figure beside its reference from the same run
      --omnidev PATH      benchmark this binary instead of building target/release/omnidev
  demo [ARGS...]        run a pod on examples/omnigent-example (ARGS go to `omnidev up`)

  --dry-run             (ci, dist, demo) print the commands instead of running them
";

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h" {
        print!("{USAGE}");
        return Ok(());
    }
    let task = args.remove(0);
    match task.as_str() {
        "ci" => ci::run(&ci::Options::parse(args)?),
        "test-e2e" => e2e::run(&e2e::Options::parse(args)?),
        "dist" => dist::run(&dist::Options::parse(args)?).map(|_| ()),
        "bench" => bench::run(&bench::Options::parse(args)?),
        "demo" => demo::run(&demo::Options::parse(args)),
        other => bail!("unknown task `{other}`\n\n{USAGE}"),
    }
}
