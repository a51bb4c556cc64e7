//! What the budget tests (`tests/budgets.rs`) and `cargo xtask bench rss`
//! share: the checkouts that attack the budgets.
#![allow(dead_code)]

use std::fmt::Write as _;

/// A profile of one service writing `line` (a Python expression) `times`
/// at a time every `pause` seconds, keeping the count of lines written in
/// `count` (in the checkout).
pub fn printer_profile(line: &str, times: u32, pause: f64) -> String {
    format!(
        r#"
[services.printer]
command = ["python3", "-u", "-c", "import os, sys, time\nline = {line} + '\\n'\nn = 0\nwhile True:\n    sys.stdout.write(line * {times})\n    n += {times}\n    open('count.tmp', 'w').write(str(n))\n    os.replace('count.tmp', 'count')\n    time.sleep({pause})\n"]
restart = "never"
grace-ms = 2000
"#
    )
}

/// `count` `.gitignore` rules of four kinds (a directory glob, an
/// extension, an anchored directory, a prefix).
pub fn many_rules(count: usize) -> String {
    let mut rules = String::new();
    for i in 0..count {
        let _ = match i % 4 {
            0 => writeln!(rules, "gen{i}/**/*.py"),
            1 => writeln!(rules, "*.ext{i}"),
            2 => writeln!(rules, "/dir{i}/"),
            _ => writeln!(rules, "tmp{i}*"),
        };
    }
    rules
}

/// A profile of idle services named `names`, each reloaded on changes to
/// `<name>/**/*.py`.
pub fn watched_profile(names: &[&str]) -> String {
    let mut profile = String::new();
    for name in names {
        let _ = writeln!(
            profile,
            "[services.{name}]\ncommand = [\"sleep\", \"1000\"]\nwatch = [\"{name}/**/*.py\"]\n"
        );
    }
    profile
}

/// A profile of `services` one-shot services under an `[env]` of
/// `entries` entries: each service's environment is the pod's, so the
/// cost must follow the profile's size, not services x entries.
pub fn many_services_profile(services: usize, entries: usize) -> String {
    let mut text = String::from("[env]\n");
    for i in 0..entries {
        let _ = writeln!(text, "ENV_{i:05} = \"value-{i:05}-abcdefgh\"");
    }
    for i in 0..services {
        let _ = writeln!(
            text,
            "[services.service{i:04}]\ncommand = [\"sleep\", \"1\"]\nrestart = \"never\""
        );
    }
    text
}
