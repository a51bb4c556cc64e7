//! What the bundled example prints and leaves behind, read back: its log
//! lines (server, host, web dev server) and its record of dependency
//! installs.

use std::fs;
use std::path::Path;

/// Parsers for the example's log lines (see `examples/omnigent-example`).
pub mod parse {
    fn value_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
        let start = line.find(key)? + key.len();
        let rest = &line[start..];
        Some(&rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())])
    }

    fn port_of(url: &str) -> Option<u16> {
        url.rsplit(':').next()?.trim_end_matches('/').parse().ok()
    }

    /// `(port, pid)` of every `omnigent-server: listening on …` line, in order.
    pub fn listening(out: &str) -> Vec<(u16, u32)> {
        out.lines()
            .filter(|line| line.contains("omnigent-server: listening on "))
            .filter_map(|line| {
                let port = port_of(value_after(line, "listening on ")?)?;
                let pid = value_after(line, "pid=")?.parse().ok()?;
                Some((port, pid))
            })
            .collect()
    }

    /// One start of the example host.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct HostStart {
        /// Its pid.
        pub pid: u32,
        /// Whether the server answered `/health` when the host started.
        pub server_was_ready: bool,
        /// Line number in the output.
        pub line: usize,
    }

    /// Every `omnigent-host: started …` line, in order.
    pub fn host_starts(out: &str) -> Vec<HostStart> {
        out.lines()
            .enumerate()
            .filter(|(_, line)| line.contains("omnigent-host: started "))
            .filter_map(|(index, line)| {
                Some(HostStart {
                    pid: value_after(line, "pid=")?.parse().ok()?,
                    server_was_ready: value_after(line, "server-ready-at-start=")? == "yes",
                    line: index,
                })
            })
            .collect()
    }

    /// Line number of the `listening` line of the server with `pid`.
    pub fn listening_line(out: &str, pid: u32) -> Option<usize> {
        let needle = format!("pid={pid} ");
        out.lines().position(|line| {
            line.contains("omnigent-server: listening on ") && line.contains(&needle)
        })
    }

    /// Ports from the web dev server's `Local:` lines, in order.
    pub fn vite_ports(out: &str) -> Vec<u16> {
        out.lines().filter_map(|line| port_of(value_after(line, "Local:   ")?)).collect()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn parses_the_example_lines() {
            let out = "server | 12:00:00 omnigent-server: listening on http://127.0.0.1:6767 pid=42 database=/x\n\
                       host   | 12:00:01 omnigent-host: started pid=43 server=http://127.0.0.1:6767 server-ready-at-start=yes\n\
                       vite   |   ➜  Local:   http://127.0.0.1:5173/\n";
            assert_eq!(listening(out), vec![(6767, 42)]);
            assert_eq!(
                host_starts(out),
                vec![HostStart { pid: 43, server_was_ready: true, line: 1 }]
            );
            assert_eq!(listening_line(out, 42), Some(0));
            assert_eq!(vite_ports(out), vec![5173]);
        }
    }
}

/// Lines in the checkout's `web/.install-log`: one per dependency install
/// (`<time> pid=N agent=pnpm/X init-cwd=DIR`, see the example's
/// `web/record-install.mjs`).
pub fn install_log(repo: &Path) -> Vec<String> {
    fs::read_to_string(repo.join("web/.install-log"))
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// How many times the example's dependencies were installed.
pub fn install_count(repo: &Path) -> usize {
    install_log(repo).len()
}
