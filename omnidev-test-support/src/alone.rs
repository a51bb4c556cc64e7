//! Running one test in a process of its own.
//!
//! A test whose meaning depends on which descriptors the process holds
//! (a listener dropped must be gone; a child must inherit nothing) cannot
//! share its process with tests that fork: between a sibling's `fork` and
//! its `exec`, the sibling's child holds a copy of every descriptor,
//! close-on-exec or not. [`in_own_process`] runs the calling test again,
//! alone, in a fresh process of the same test binary.

use std::process::Command;

/// Set in the re-run process to the name of the test it runs.
const ALONE: &str = "OMNIDEV_TEST_ALONE";

/// Returns `true` in the process of its own, where the test's body runs;
/// elsewhere runs the test there, asserts that it passed, and returns
/// `false` (the caller then returns). `module` is the test's
/// `module_path!()`, `name` its function's name.
///
/// ```no_run
/// #[test]
/// fn holds_a_listener() {
///     if !omnidev_test_support::in_own_process(module_path!(), "holds_a_listener") {
///         return;
///     }
///     // the body: no sibling test shares this process
/// }
/// ```
pub fn in_own_process(module: &str, name: &str) -> bool {
    // libtest names a test by its path without the crate.
    let path = module.split_once("::").map_or("", |(_, rest)| rest);
    let test = if path.is_empty() { name.to_owned() } else { format!("{path}::{name}") };
    if std::env::var(ALONE).is_ok_and(|alone| alone == test) {
        return true;
    }
    let binary = std::env::current_exe().expect("the test binary");
    let output = Command::new(binary)
        .args([test.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE, &test)
        .output()
        .expect("running the test in a process of its own");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{test}, run alone, failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    false
}
