//! Project automation: `cargo xtask ci | test-e2e | dist | bench | demo`.

mod bench;
mod ci;
mod demo;
mod dist;
mod e2e;
mod flags;
mod prereqs;
mod util;

use anyhow::Result;
use clap::Parser;

use crate::flags::Task;

fn main() -> Result<()> {
    match flags::Xtask::parse().task {
        Task::Ci(options) => ci::run(&options),
        Task::TestE2e(options) => e2e::run(&options),
        Task::Dist(options) => dist::run(&options).map(|_| ()),
        Task::Bench(options) => bench::run(&options),
        Task::Demo(options) => demo::run(&options),
    }
}
