//! Readiness probes: HTTP GET (2xx), TCP connect, command and log line,
//! behind the [`Probe`] trait, plus the polling loop that drives them.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::guard::Guard;
use crate::spec::{CommandSpec, ProbeSpec, Readiness};
use crate::sync::Locked;

/// One readiness check. Implementations must be cheap to call repeatedly
/// and must give up on their own within a few seconds.
#[async_trait]
pub trait Probe: Send + Sync + std::fmt::Debug {
    /// Returns `Ok(())` when the service is ready, or why it is not.
    async fn check(&self) -> Result<(), String>;

    /// Like [`Probe::check`], also naming the address that answered, for
    /// probes that connect somewhere (HTTP and TCP): the listener there is
    /// the one whose owner counts ([`crate::listener::owner_at`]). `None`
    /// for the others.
    async fn reach(&self) -> Result<Option<std::net::SocketAddr>, String> {
        self.check().await.map(|()| None)
    }

    /// The least time from one attempt's start to the next one brought
    /// forward by the service's output ([`poll_until_ready`]), asked after
    /// each failed attempt. A probe whose last attempt reached the service
    /// waits [`OUTPUT_SPACING`], so a service that logs each request it
    /// answers is not probed in a loop; one that asks nothing (a log
    /// probe) or whose last attempt reached nobody (a refused connect,
    /// which no service sees, so its output cannot be about it) looks
    /// after [`QUIET_OUTPUT_SPACING`]: at once after a pause, at most a
    /// hundred times a second under a flood.
    fn output_spacing(&self) -> Duration {
        OUTPUT_SPACING
    }
}

/// See [`Probe::output_spacing`]: at most ten attempts a second come from
/// output, whatever the service prints.
pub const OUTPUT_SPACING: Duration = Duration::from_millis(100);

/// [`Probe::output_spacing`] of a probe the service cannot have seen.
pub const QUIET_OUTPUT_SPACING: Duration = Duration::from_millis(10);

/// Whether a connecting probe's last attempt got through to a listener:
/// what [`Probe::output_spacing`] of HTTP and TCP probes goes by.
#[derive(Debug)]
struct Reached(std::sync::atomic::AtomicBool);

impl Reached {
    /// Until the first attempt, as if it had reached the service.
    fn new() -> Self {
        Self(true.into())
    }

    fn set(&self, reached: bool) {
        self.0.store(reached, std::sync::atomic::Ordering::Relaxed);
    }

    fn spacing(&self) -> Duration {
        if self.0.load(std::sync::atomic::Ordering::Relaxed) {
            OUTPUT_SPACING
        } else {
            QUIET_OUTPUT_SPACING
        }
    }
}

/// HTTP GET over plain HTTP expecting a 2xx status.
#[derive(Debug)]
pub struct HttpProbe {
    client: reqwest::Client,
    url: String,
    host: Option<String>,
    reached: Reached,
}

/// One HTTP client for every probe of the process. Building one loads the
/// TLS roots, which took about 100 ms of a runtime thread (in a debug
/// build) at every start of a service, before its first readiness attempt.
fn http_client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // No connection is kept once answered: a server that waits
            // for its open connections on SIGTERM (gunicorn) would wait for
            // the probe's until its grace ran out and it was SIGKILLed.
            reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .no_proxy()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap_or_default()
        })
        .clone()
}

/// Builds the shared HTTP client now (the supervisor does it at start
/// when a service has an HTTP probe), so no service start pays for it.
pub fn warm_http() {
    drop(http_client());
}

impl HttpProbe {
    /// A probe of `url`, sending `host` as the `Host` header when given.
    pub fn new(url: impl Into<String>, host: Option<String>) -> Self {
        Self { client: http_client(), url: url.into(), host, reached: Reached::new() }
    }
}

#[async_trait]
impl Probe for HttpProbe {
    async fn check(&self) -> Result<(), String> {
        self.reach().await.map(drop)
    }

    fn output_spacing(&self) -> Duration {
        self.reached.spacing()
    }

    async fn reach(&self) -> Result<Option<std::net::SocketAddr>, String> {
        let mut request = self.client.get(&self.url).header(reqwest::header::CONNECTION, "close");
        if let Some(host) = &self.host {
            request = request.header(reqwest::header::HOST, host);
        }
        let response = request.send().await.map_err(|e| {
            // A connection that was never made carried no request.
            self.reached.set(!e.is_connect());
            crate::text::with_causes(&e)
        })?;
        self.reached.set(true);
        let status = response.status();
        if status.is_success() {
            Ok(response.remote_addr())
        } else {
            Err(format!("HTTP status {status}"))
        }
    }
}

/// A TCP connect to `host:port` succeeding.
#[derive(Debug)]
pub struct TcpProbe {
    address: String,
    reached: Reached,
}

impl TcpProbe {
    /// A probe of `address` (`host:port`).
    pub fn new(address: impl Into<String>) -> Self {
        Self { address: address.into(), reached: Reached::new() }
    }
}

#[async_trait]
impl Probe for TcpProbe {
    async fn check(&self) -> Result<(), String> {
        self.reach().await.map(drop)
    }

    fn output_spacing(&self) -> Duration {
        self.reached.spacing()
    }

    async fn reach(&self) -> Result<Option<std::net::SocketAddr>, String> {
        let connect = tokio::net::TcpStream::connect(&self.address);
        let outcome = match tokio::time::timeout(Duration::from_secs(2), connect).await {
            Ok(Ok(stream)) => answered(&stream),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("connect timed out".to_owned()),
        };
        self.reached.set(outcome.is_ok());
        outcome
    }
}

/// Where a connected `stream` reached, unless it reached itself: a connect
/// to a local port nobody listens on meets itself when the kernel picks
/// that very port as its source (TCP's simultaneous open), which a port
/// in the ephemeral range allows. That is nobody answering, and taking it
/// for a listener made a service ready before it had bound its port (and
/// the probe's socket then held the port the service went on to bind).
fn answered(stream: &tokio::net::TcpStream) -> Result<Option<std::net::SocketAddr>, String> {
    let peer = stream.peer_addr().ok();
    match stream.local_addr() {
        Ok(local) if Some(local) == peer => {
            Err(format!("nothing listens on {local} (the connection met itself)"))
        }
        _ => Ok(peer),
    }
}

/// A command exiting 0 (run in its own process group, output discarded,
/// killed with its group after 10 s, when the check is abandoned, and once
/// it has answered, so nothing it started outlives the check).
#[derive(Debug)]
pub struct CommandProbe {
    command: CommandSpec,
    /// The supervisor's orphan guard, told about each check's group so a
    /// check in flight dies with a SIGKILLed supervisor too.
    guard: Option<Arc<Guard>>,
    /// With cgroups, the pod's cgroup, which each check runs in from
    /// before `exec`: the guard kills it whole, so a check the guard was
    /// not yet told about dies with a SIGKILLed supervisor too.
    cgroup: Option<std::path::PathBuf>,
}

impl CommandProbe {
    /// A probe running `command`.
    pub fn new(command: CommandSpec) -> Self {
        Self { command, guard: None, cgroup: None }
    }
}

#[async_trait]
impl Probe for CommandProbe {
    async fn check(&self) -> Result<(), String> {
        let placement = match &self.cgroup {
            Some(dir) => crate::process::Placement::Cgroup(dir),
            None => crate::process::Placement::Here,
        };
        let mut child = crate::process::spawn_group_in(&self.command, placement)
            .map_err(|e| format!("could not run `{}`: {e}", self.command.program))?;
        drop(child.stdout.take());
        drop(child.stderr.take());
        // Killed when the check ends in any way, including being dropped
        // when the engine aborts the probe of a service that stops.
        let group = KillGroupOnDrop::new(child.id() as i32, self.guard.clone());
        let exit = child.wait();
        tokio::pin!(exit);
        match tokio::time::timeout(Duration::from_secs(10), &mut exit).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(format!("probe command ended with {status}")),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => {
                drop(group);
                let _ = exit.await;
                Err("probe command timed out".to_owned())
            }
        }
    }
}

/// SIGKILLs a process group when dropped. (A dropped `tokio` child is not
/// killed, and would be in its own session, out of everyone's reach.)
/// While registered, the orphan guard kills the group too.
struct KillGroupOnDrop {
    pgid: i32,
    guard: Option<Arc<Guard>>,
}

impl KillGroupOnDrop {
    fn new(pgid: i32, guard: Option<Arc<Guard>>) -> Self {
        if let Some(guard) = &guard {
            guard.register(pgid);
        }
        Self { pgid, guard }
    }
}

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        crate::process::signal_group(self.pgid, libc::SIGKILL);
        if let Some(guard) = &self.guard {
            guard.unregister(self.pgid);
        }
    }
}

/// The longest line a log probe matches, in bytes: a line longer than the
/// pieces kept for display ([`crate::spec::LogConfig::max_line_bytes`]) is
/// put back together for the probe up to this; a longer one never matches.
pub const LOG_PROBE_LINE_BYTES: usize = 1024 * 1024;

/// The longest log-probe pattern accepted, in bytes.
pub const MAX_LOG_PATTERN: usize = 1024;

/// Compiles a log-probe pattern: at most [`MAX_LOG_PATTERN`] bytes, and a
/// compiled size bounded so a hostile profile cannot make every output line
/// expensive. The error says what is wrong with the pattern.
pub fn compile_log_pattern(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.len() > MAX_LOG_PATTERN {
        return Err(format!(
            "the pattern is {} bytes; at most {MAX_LOG_PATTERN} are allowed",
            pattern.len()
        ));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| e.to_string())
}

/// What a run's readiness polling hears of its output: the supervisor's
/// log store offers it each batch of lines of the service's current run.
/// Every batch the service itself writes is told through
/// [`LineWatch::output`] (a service often says it listens just as it
/// does, so the next attempt need not wait out its pause), and a log
/// probe's watch ([`LineWatch::new`]) also matches each line against its
/// pattern until one matches.
#[derive(Debug)]
pub struct LineWatch {
    regex: Option<regex::Regex>,
    /// The log probe's pattern; `None` for a watch that only tells of
    /// output ([`LineWatch::output_only`]).
    pattern: Option<String>,
    matched: std::sync::atomic::AtomicBool,
    /// Per stream (stdout, stderr, the supervisor's), a line being put
    /// back together from the pieces it was cut into.
    partial: std::sync::Mutex<[Partial; 3]>,
    /// Notified at each batch of the service's own output.
    output: tokio::sync::Notify,
}

/// A stream's line as it arrives in pieces.
#[derive(Debug, Default)]
enum Partial {
    /// No piece waits for the rest of its line.
    #[default]
    None,
    /// The pieces so far.
    Open(String),
    /// The line grew past [`LOG_PROBE_LINE_BYTES`]: it will not match.
    TooLong,
}

impl Partial {
    /// The line with `piece` added.
    fn with(self, piece: &str) -> Self {
        match self {
            Partial::None if piece.len() <= LOG_PROBE_LINE_BYTES => Partial::Open(piece.to_owned()),
            Partial::Open(mut text) if text.len() + piece.len() <= LOG_PROBE_LINE_BYTES => {
                text.push_str(piece);
                Partial::Open(text)
            }
            Partial::None | Partial::Open(_) | Partial::TooLong => Partial::TooLong,
        }
    }
}

impl LineWatch {
    /// A watch for `pattern` (one that never matches when the pattern does
    /// not compile; the probe then reports why).
    pub fn new(pattern: &str) -> Self {
        Self {
            regex: compile_log_pattern(pattern).ok(),
            pattern: Some(pattern.to_owned()),
            matched: std::sync::atomic::AtomicBool::new(false),
            partial: std::sync::Mutex::default(),
            output: tokio::sync::Notify::new(),
        }
    }

    /// A watch that matches nothing and only tells of output: for a run
    /// whose probe asks the service (HTTP, TCP, a command).
    pub fn output_only() -> Self {
        Self {
            regex: None,
            pattern: None,
            matched: std::sync::atomic::AtomicBool::new(false),
            partial: std::sync::Mutex::default(),
            output: tokio::sync::Notify::new(),
        }
    }

    /// Notified (one stored permit, however many batches) each time the
    /// service writes output: what [`poll_until_ready`] waits on beside
    /// its pause.
    pub fn output(&self) -> &tokio::sync::Notify {
        &self.output
    }

    /// Looks at `lines` of `stream` (until one has matched), `cuts` naming
    /// those that are pieces of a longer line (not its last): such a line
    /// is matched whole once its last piece comes, if it is at most
    /// [`LOG_PROBE_LINE_BYTES`] long; a piece alone never matches.
    pub(crate) fn offer(&self, stream: crate::event::Stream, lines: &[String], cuts: &[usize]) {
        let told = stream != crate::event::Stream::Supervisor && !lines.is_empty();
        self.offer_lines(stream, lines, cuts);
        // After the match is recorded, so the attempt it wakes sees it.
        if told {
            self.output.notify_one();
        }
    }

    fn offer_lines(&self, stream: crate::event::Stream, lines: &[String], cuts: &[usize]) {
        use std::sync::atomic::Ordering;
        let Some(regex) = &self.regex else { return };
        if self.matched.load(Ordering::Relaxed) {
            return;
        }
        let mut partials = self.partial.locked();
        let partial = &mut partials[match stream {
            crate::event::Stream::Stdout | crate::event::Stream::Merged => 0,
            crate::event::Stream::Stderr => 1,
            crate::event::Stream::Supervisor => 2,
        }];
        for (i, line) in lines.iter().enumerate() {
            let cut = cuts.contains(&i);
            let whole = match std::mem::take(partial) {
                Partial::None if !cut => std::borrow::Cow::Borrowed(line.as_str()),
                before => match before.with(line) {
                    // More pieces follow.
                    next if cut => {
                        *partial = next;
                        continue;
                    }
                    Partial::Open(text) => std::borrow::Cow::Owned(text),
                    Partial::None | Partial::TooLong => continue,
                },
            };
            // What people see of it: the text every front-end shows.
            if regex.is_match(&crate::text::sanitise(&whole, false)) {
                self.matched.store(true, Ordering::Release);
                return;
            }
        }
    }

    /// Whether a line has matched.
    pub fn matched(&self) -> bool {
        self.matched.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Ready once a line of the service's output has matched its pattern.
#[derive(Debug)]
pub struct LogProbe {
    watch: Arc<LineWatch>,
}

impl LogProbe {
    /// A probe answering from `watch`.
    pub fn new(watch: Arc<LineWatch>) -> Self {
        Self { watch }
    }
}

#[async_trait]
impl Probe for LogProbe {
    async fn check(&self) -> Result<(), String> {
        if self.watch.matched() {
            return Ok(());
        }
        let pattern = self.watch.pattern.as_deref().unwrap_or_default();
        match &self.watch.regex {
            Some(_) => Err(format!("no output line matches `{pattern}` yet")),
            None => Err(format!(
                "invalid log pattern `{pattern}`: {}",
                compile_log_pattern(pattern).err().unwrap_or_default()
            )),
        }
    }

    fn output_spacing(&self) -> Duration {
        QUIET_OUTPUT_SPACING
    }
}

/// Builds the probe described by `spec`, with command checks registered
/// with the supervisor's orphan guard and, with cgroups, run in the pod's
/// `cgroup`. A log probe built here sees no lines (nothing offers it any);
/// the supervisor builds its own, fed by the service's output.
pub(crate) fn probe_with_guard(
    spec: &ProbeSpec,
    guard: Option<Arc<Guard>>,
    cgroup: Option<std::path::PathBuf>,
) -> Box<dyn Probe> {
    match spec {
        ProbeSpec::Http { url, host } => Box::new(HttpProbe::new(url.clone(), host.clone())),
        ProbeSpec::Tcp { address } => Box::new(TcpProbe::new(address.clone())),
        ProbeSpec::Command(command) => {
            Box::new(CommandProbe { command: command.clone(), guard, cgroup })
        }
        ProbeSpec::Log { pattern } => Box::new(LogProbe::new(Arc::new(LineWatch::new(pattern)))),
    }
}

/// What the polling loop reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// An attempt failed; the next one follows after `next`.
    NotYet {
        /// Which attempt (1-based).
        attempt: u32,
        /// Why it failed.
        error: String,
        /// The pause before the next attempt.
        next: Duration,
        /// Whether this attempt was brought forward by the service's
        /// output (see [`poll_until_ready`]).
        after_output: bool,
    },
    /// The timeout passed without success; polling goes on.
    TimedOut,
    /// The probe passed; polling has stopped.
    Ready,
}

/// The shortest pause between two attempts.
const FIRST_POLL: Duration = Duration::from_millis(20);

/// The pause after an attempt `elapsed` into polling: a tenth of the time
/// spent so far (at least 20 ms, at most `interval`). A service that boots
/// in 300 ms is seen ready within about 30 ms of it, one that boots in
/// 10 s within about a second, and a slow one is not polled hundreds of
/// times. (Doubling the pause instead left a 300 ms boot unseen until
/// 620 ms.)
fn pause_after(elapsed: Duration, interval: Duration) -> Duration {
    (elapsed / 10).max(FIRST_POLL).min(interval.max(Duration::from_millis(1)))
}

/// Polls `probe` until it passes, pausing as `pause_after` says,
/// calling `report(NotYet)` after each failed attempt, `report(TimedOut)`
/// once when `readiness.timeout` has passed and `report(Ready)` on success.
///
/// With `output` (a run's [`LineWatch::output`]), output the service
/// writes during a pause ends it early: the next attempt comes once
/// [`Probe::output_spacing`] has passed since the last one began. A
/// server that boots for 20 s is polled about once a second by then, and
/// the line it prints as it starts listening would otherwise wait up to
/// that second for the attempt that sees it.
pub async fn poll_until_ready(
    probe: &dyn Probe,
    readiness: &Readiness,
    output: Option<&tokio::sync::Notify>,
    mut report: impl FnMut(ProbeOutcome) + Send,
) {
    let started = tokio::time::Instant::now();
    let mut timed_out = false;
    let mut attempt: u32 = 0;
    let mut after_output = false;
    loop {
        attempt = attempt.saturating_add(1);
        let began = tokio::time::Instant::now();
        let error = match probe.check().await {
            Ok(()) => {
                report(ProbeOutcome::Ready);
                return;
            }
            Err(error) => error,
        };
        let pause = pause_after(started.elapsed(), readiness.interval);
        report(ProbeOutcome::NotYet { attempt, error, next: pause, after_output });
        if !timed_out && started.elapsed() >= readiness.timeout {
            timed_out = true;
            report(ProbeOutcome::TimedOut);
        }
        let scheduled = tokio::time::Instant::now() + pause;
        after_output = false;
        match output {
            None => tokio::time::sleep_until(scheduled).await,
            Some(output) => {
                tokio::select! {
                    () = tokio::time::sleep_until(scheduled) => {}
                    () = output.notified() => {
                        let spaced = began + probe.output_spacing();
                        after_output = spaced < scheduled;
                        tokio::time::sleep_until(spaced.min(scheduled)).await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[derive(Debug, Default)]
    struct PassesOnCall(AtomicU32, u32);

    #[async_trait]
    impl Probe for PassesOnCall {
        async fn check(&self) -> Result<(), String> {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            if n >= self.1 { Ok(()) } else { Err(format!("call {n}")) }
        }
    }

    #[tokio::test]
    async fn reports_timeout_once_then_ready() {
        // Pauses stay at 20 ms, so the 12th call comes after 220 ms or more,
        // well past the 100 ms timeout.
        let probe = PassesOnCall(AtomicU32::new(0), 12);
        let readiness = Readiness {
            probe: ProbeSpec::Tcp { address: String::new() },
            interval: Duration::from_millis(20),
            timeout: Duration::from_millis(100),
            listener: None,
        };
        let mut outcomes = Vec::new();
        poll_until_ready(&probe, &readiness, None, |o| {
            if !matches!(o, ProbeOutcome::NotYet { .. }) {
                outcomes.push(o);
            }
        })
        .await;
        assert_eq!(outcomes, [ProbeOutcome::TimedOut, ProbeOutcome::Ready]);
        assert_eq!(probe.0.load(Ordering::SeqCst), 12);
    }

    /// Ready once its flag is set; each check notifies `output` when
    /// `logs_each_request` (a server writing an access log line).
    #[derive(Debug, Default)]
    struct Flagged {
        ready: std::sync::atomic::AtomicBool,
        checks: AtomicU32,
        logs_each_request: Option<Arc<tokio::sync::Notify>>,
    }

    #[async_trait]
    impl Probe for Flagged {
        async fn check(&self) -> Result<(), String> {
            self.checks.fetch_add(1, Ordering::SeqCst);
            if let Some(output) = &self.logs_each_request {
                output.notify_one();
            }
            if self.ready.load(Ordering::SeqCst) { Ok(()) } else { Err("not yet".to_owned()) }
        }
    }

    fn slow_readiness() -> Readiness {
        Readiness {
            probe: ProbeSpec::Tcp { address: String::new() },
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(3600),
            listener: None,
        }
    }

    /// Polls `probe` on a task; the receiver hears when it is ready.
    fn polled(
        probe: Arc<dyn Probe>,
        output: Arc<tokio::sync::Notify>,
    ) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut tx = Some(tx);
            poll_until_ready(probe.as_ref(), &slow_readiness(), Some(&output), |o| {
                if o == ProbeOutcome::Ready {
                    tx.take().map(|tx| tx.send(()));
                }
            })
            .await;
        });
        rx
    }

    #[tokio::test(start_paused = true)]
    async fn output_brings_the_next_attempt_forward_by_the_spacing_at_most() {
        let probe = Arc::new(Flagged::default());
        let output = Arc::new(tokio::sync::Notify::new());
        let ready = polled(probe.clone(), output.clone());
        // A minute in, the pause between attempts is 6 s.
        tokio::time::sleep(Duration::from_secs(60)).await;
        let before = probe.checks.load(Ordering::SeqCst);
        probe.ready.store(true, Ordering::SeqCst);
        let said = tokio::time::Instant::now();
        output.notify_one();
        ready.await.expect("ready");
        assert!(said.elapsed() <= OUTPUT_SPACING, "ready {:?} after the output", said.elapsed());
        assert_eq!(probe.checks.load(Ordering::SeqCst), before + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_log_probe_looks_the_moment_its_line_comes() {
        let watch = Arc::new(LineWatch::new("^listening$"));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let probe = LogProbe::new(watch.clone());
        let waiting = watch.clone();
        tokio::spawn(async move {
            let mut tx = Some(tx);
            let readiness = slow_readiness();
            poll_until_ready(&probe, &readiness, Some(waiting.output()), |o| {
                if o == ProbeOutcome::Ready {
                    tx.take().map(|tx| tx.send(()));
                }
            })
            .await;
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        let said = tokio::time::Instant::now();
        watch.offer(crate::event::Stream::Stdout, &["listening".to_owned()], &[]);
        rx.await.expect("ready");
        assert_eq!(said.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_log_probe_under_a_flood_looks_a_hundred_times_a_second_at_most() {
        let watch = Arc::new(LineWatch::new("^never$"));
        let probe = LogProbe::new(watch.clone());
        let attempts = Arc::new(AtomicU32::new(0));
        let counted = attempts.clone();
        let waiting = watch.clone();
        let polling = tokio::spawn(async move {
            poll_until_ready(&probe, &slow_readiness(), Some(waiting.output()), |_| {
                counted.fetch_add(1, Ordering::SeqCst);
            })
            .await;
        });
        // A line every millisecond for 10 s.
        for _ in 0..10_000 {
            watch.offer(crate::event::Stream::Stdout, &["flood".to_owned()], &[]);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        polling.abort();
        let attempts = attempts.load(Ordering::SeqCst);
        assert!((900..=1100).contains(&attempts), "{attempts} looks in 10 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_service_that_logs_each_attempt_is_probed_ten_times_a_second_at_most() {
        let output = Arc::new(tokio::sync::Notify::new());
        let probe =
            Arc::new(Flagged { logs_each_request: Some(output.clone()), ..Flagged::default() });
        let _ready = polled(probe.clone(), output);
        tokio::time::sleep(Duration::from_secs(100)).await;
        let checks = probe.checks.load(Ordering::SeqCst);
        // Every 100 ms: each attempt's line brings the next one forward,
        // never sooner (but in the first second, where the schedule's own
        // pauses are shorter). Without output, about 70 attempts in 100 s.
        assert!((990..=1030).contains(&checks), "{checks} attempts in 100 s");
    }

    #[test]
    fn only_the_services_own_output_is_told() {
        use crate::event::Stream::{Stdout, Supervisor};
        let watch = LineWatch::output_only();
        watch.offer(Supervisor, &["stopping".to_owned()], &[]);
        watch.offer(Stdout, &[], &[]);
        let mut told = std::pin::pin!(watch.output().notified());
        assert!(
            futures_now(told.as_mut()).is_none(),
            "the supervisor's lines and empty batches are not output"
        );
        watch.offer(Stdout, &["x".to_owned()], &[]);
        assert!(futures_now(told.as_mut()).is_some());
        assert!(!watch.matched(), "an output-only watch matches nothing");
    }

    /// Polls `future` once.
    fn futures_now<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        match future.poll(&mut std::task::Context::from_waker(waker)) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        }
    }

    #[test]
    fn pauses_grow_with_the_time_spent() {
        let ms = Duration::from_millis;
        let second = Duration::from_secs(1);
        assert_eq!(pause_after(ms(0), second), ms(20));
        assert_eq!(pause_after(ms(300), second), ms(30));
        assert_eq!(pause_after(ms(5000), second), ms(500));
        assert_eq!(pause_after(ms(60_000), second), second);
        assert_eq!(pause_after(ms(60_000), ms(5)), ms(5));
    }

    #[test]
    fn a_line_watch_puts_each_streams_pieces_back_together() {
        use crate::event::Stream::{Stderr, Stdout};
        let lines = |texts: &[&str]| texts.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
        let watch = LineWatch::new("^ready$");
        // Stdout's line comes in two batches, with a stderr line between.
        watch.offer(Stdout, &lines(&["rea"]), &[0]);
        watch.offer(Stderr, &lines(&["x"]), &[]);
        assert!(!watch.matched(), "a piece alone");
        watch.offer(Stdout, &lines(&["dy", "next"]), &[]);
        assert!(watch.matched(), "rea + dy");
        let watch = LineWatch::new("^ready$");
        watch.offer(Stdout, &lines(&["ready", "ready"]), &[0]);
        assert!(!watch.matched(), "readyready is one line");
        watch.offer(Stdout, &lines(&["ready"]), &[]);
        assert!(watch.matched(), "a line after it");
    }

    /// A pattern matches the line as every front-end shows it: colours
    /// and a hyperlink's wrapper gone, other controls visible.
    #[test]
    fn a_line_watch_matches_the_text_people_see() {
        use crate::event::Stream::Stdout;
        let seen = |pattern: &str, line: &str| {
            let watch = LineWatch::new(pattern);
            watch.offer(Stdout, &[line.to_owned()], &[]);
            watch.matched()
        };
        assert!(seen("^listening on :8000$", "\x1b[32mlistening\x1b[0m on :8000"));
        assert!(seen("^open docs$", "open \x1b]8;;http://localhost/\x1b\\docs\x1b]8;;\x1b\\"));
        // A bell is shown as `^G`, as on screen: not the bare word.
        assert!(!seen("^ready$", "ready\x07"));
        assert!(seen("^ready\\^G$", "ready\x07"));
    }

    #[tokio::test]
    async fn tcp_probe_sees_a_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let reached = listener.local_addr().expect("addr");
        let address = reached.to_string();
        assert!(TcpProbe::new(address.clone()).check().await.is_ok());
        assert_eq!(TcpProbe::new(address.clone()).reach().await, Ok(Some(reached)));
        drop(listener);
        assert!(TcpProbe::new(address).check().await.is_err());
    }

    /// A socket bound to a port and connected to that same port meets
    /// itself, as a probe's connect does when the kernel picks the probed
    /// port as its source: nobody listens, so it is no answer.
    #[tokio::test]
    async fn a_connection_that_met_itself_is_no_answer() {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let own = socket.local_addr().expect("addr");
        let stream = socket.connect(own).await.expect("a connect to itself");
        assert_eq!(stream.peer_addr().ok(), Some(own), "it met itself");
        let said = answered(&stream).expect_err("no listener answered");
        assert!(said.contains("met itself"), "{said}");
        // A real listener's answer is where it was reached.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let at = listener.local_addr().expect("addr");
        let stream = tokio::net::TcpStream::connect(at).await.expect("connect");
        assert_eq!(answered(&stream), Ok(Some(at)));
    }

    #[tokio::test]
    async fn command_probe_follows_exit_code() {
        let ok = CommandProbe::new(CommandSpec { program: "true".into(), ..Default::default() });
        let bad = CommandProbe::new(CommandSpec { program: "false".into(), ..Default::default() });
        assert!(ok.check().await.is_ok());
        assert!(bad.check().await.is_err());
    }

    #[tokio::test]
    async fn an_abandoned_command_check_leaves_no_process() {
        // The engine aborts the probe task when the service stops or exits;
        // the command's group must not outlive the check.
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_file = dir.path().join("pid");
        let probe = CommandProbe::new(CommandSpec {
            program: "sh".into(),
            args: vec!["-c".into(), format!("sleep 1000 & echo $! > {}; wait", pid_file.display())],
            ..Default::default()
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let pid = {
            let check = probe.check();
            tokio::pin!(check);
            loop {
                tokio::select! {
                    _ = &mut check => panic!("the probe command ended on its own"),
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
                let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
                if let Ok(pid) = text.trim().parse::<u32>() {
                    break pid;
                }
                assert!(std::time::Instant::now() < deadline, "no pid written");
            }
        };
        while crate::process::pid_alive(pid) {
            assert!(std::time::Instant::now() < deadline, "probe's child {pid} outlived the check");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn http_probe_wants_2xx_and_sends_host() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            let mut hosts = Vec::new();
            for status in ["503 Service Unavailable", "200 OK"] {
                let (mut socket, _) = listener.accept().await.expect("accept");
                let mut buf = vec![0u8; 4096];
                let n = socket.read(&mut buf).await.expect("read");
                let request = String::from_utf8_lossy(&buf[..n]).to_lowercase();
                hosts.push(request.contains("host: example.test"));
                let reply =
                    format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                socket.write_all(reply.as_bytes()).await.expect("write");
            }
            hosts
        });
        let probe =
            HttpProbe::new(format!("http://127.0.0.1:{port}/health"), Some("example.test".into()));
        assert!(probe.check().await.is_err());
        // The 503 was an answer to a request: what the server prints next
        // may be its log of it.
        assert_eq!(probe.output_spacing(), OUTPUT_SPACING);
        let reached = probe.reach().await.expect("200").expect("an address");
        assert_eq!((reached.ip().to_string(), reached.port()), ("127.0.0.1".to_owned(), port));
        assert_eq!(server.await.expect("server"), [true, true]);
    }

    #[tokio::test]
    async fn an_answered_http_probe_holds_no_connection() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        // A keep-alive server: it answers and leaves the connection open
        // for the client to close.
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buf = vec![0u8; 4096];
            let n = socket.read(&mut buf).await.expect("read");
            let request = String::from_utf8_lossy(&buf[..n]).to_lowercase();
            socket
                .write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nkeep-alive: timeout=600\r\n\r\nok",
                )
                .await
                .expect("write");
            // The probe's end of the connection closes: a read sees EOF.
            let closed = tokio::time::timeout(Duration::from_secs(60), socket.read(&mut buf))
                .await
                .map(Result::ok);
            (request, closed)
        });
        let probe = HttpProbe::new(format!("http://127.0.0.1:{port}/"), None);
        probe.check().await.expect("200");
        let (request, closed) = server.await.expect("server");
        assert!(request.contains("connection: close"), "{request}");
        assert_eq!(closed, Ok(Some(0)), "the probe kept its connection open");
    }

    /// A port nobody listens on (bound, then let go).
    async fn closed_port() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        listener.local_addr().expect("addr")
    }

    #[tokio::test]
    async fn a_refused_connect_reached_nobody_so_output_is_looked_at_sooner() {
        let closed = closed_port().await;
        let http = HttpProbe::new(format!("http://{closed}/health"), None);
        let tcp = TcpProbe::new(closed.to_string());
        // Before any attempt, as if the service had been asked.
        assert_eq!(http.output_spacing(), OUTPUT_SPACING);
        assert_eq!(tcp.output_spacing(), OUTPUT_SPACING);
        assert!(http.check().await.is_err());
        assert!(tcp.check().await.is_err());
        assert_eq!(http.output_spacing(), QUIET_OUTPUT_SPACING);
        assert_eq!(tcp.output_spacing(), QUIET_OUTPUT_SPACING);
        // Once something listens there, an attempt reaches it again.
        let listener = tokio::net::TcpListener::bind(closed).await.expect("rebind");
        assert!(tcp.check().await.is_ok());
        assert_eq!(tcp.output_spacing(), OUTPUT_SPACING);
        drop(listener);
    }
}
