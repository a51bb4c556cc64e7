//! Project automation: `cargo xtask ci | test-e2e | dist | bench`.

fn main() -> anyhow::Result<()> {
    Ok(())
}
