//! The backend file watcher: content changes only, `__pycache__` and
//! gitignored files skipped, bursts coalesced into one trigger.
//!
//! Debouncing is trailing-edge: a trigger fires once no relevant change has
//! arrived for the debounce period, so 20 writes in 100 ms are one reload.
//! When the kernel has said every changed file is whole (closed after
//! writing, renamed into place or removed: inotify does, FSEvents does
//! not), a fifth of the debounce ([`settle`](bursts::settle)) is enough:
//! no write is left to wait for, only the rest of a burst under way, and
//! a save reloads about 80 ms sooner at the default.
//! Only a change that counts moves the end: writes to ignored, `__pycache__`
//! or unwatched files under the same directories (a test run's cache, a
//! build's output) never hold a reload back, however many there are. A
//! burst ends at the latest [`max_burst`](bursts::max_burst) after its first change, so
//! changes that never pause (a generator rewriting a watched file every
//! 50 ms) still reload, once per that time.
//! (notify-debouncer-full expires each event on its own timer and can split
//! such a burst into several batches, which would mean several reloads.)
//!
//! Directories count by what they hold: one that appears (created, moved
//! or renamed in) changes every matching file inside it, found by scanning
//! it at the end of the burst — after its own watch exists, so a file
//! written before that watch is still seen; one that goes away changes
//! every matching file it held (the watcher keeps the list of matching
//! files). The ignore rules ([`ignores`]) are re-read whenever one of their
//! files changes. A lost event (an error of the watcher, a queue overflow)
//! means "anything may have changed": one trigger, the watches set up
//! again, the rules and the file list re-read.

mod budget;
mod bursts;
mod classify;
mod ignores;

pub use budget::watch_budget;
use budget::{at_the_limit, count_dirs, is_limit};
use bursts::{Fired, run_bursts, spawn_reloads};
pub use classify::matches_a_file;
use classify::{Tracker, kind_counts, literal_base};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher as _};

use omnidev_core::platform::{watch_limit, watches_held};
use omnidev_core::{Changes, Supervisor};

use crate::error::{Error, Result};
use crate::session::PreparedPod;

/// What to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchConfig {
    /// The repository root; patterns and `.gitignore` are relative to it.
    pub root: PathBuf,
    /// Gitignore-style globs of the files whose changes count, e.g.
    /// `omnigent/**/*.py`.
    pub patterns: Vec<String>,
    /// Quiet period that ends a burst.
    pub debounce: Duration,
    /// Most directories this watcher may watch (see [`watch_budget`]).
    pub max_watches: usize,
    /// git's `core.excludesFile` (see [`excludes_file`]).
    pub excludes_file: Option<PathBuf>,
}

/// The user's global ignore file as git finds it (`core.excludesFile` of
/// `$GIT_CONFIG_GLOBAL`, `~/.gitconfig`, `$XDG_CONFIG_HOME/git/config` or
/// `/etc/gitconfig`, else `$XDG_CONFIG_HOME/git/ignore`).
pub fn excludes_file() -> Option<PathBuf> {
    ignore::gitignore::gitconfig_excludes_path()
}

/// One burst's worth of what the watcher saw.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// The matching files that changed (created, written, removed, renamed,
    /// or inside a directory that appeared or went away).
    pub paths: Vec<PathBuf>,
    /// Why events may have been lost in this burst (a watcher error, a
    /// queue overflow); then anything may have changed.
    pub lost: Option<String>,
    /// Why the watcher stopped watching for good (the system's watch limit
    /// was reached): it says so once and never tries again.
    pub gave_up: Option<String>,
}

/// Receives the watcher's decision about each path of each file event
/// (`--debug`): the path, the event kind, and `counts` or why it does not.
pub type Decisions = Arc<dyn Fn(&Path, EventKind, &str) + Send + Sync>;

/// Told at once of each change that counts (before its burst ends), so a
/// change whose reload is still pending is known; `true` for the first of
/// its burst (from then on the burst's reload is certain).
pub type Seen = Arc<dyn Fn(bool) + Send + Sync>;

/// What the notify thread hands to the burst thread.
#[derive(Debug)]
enum Message {
    /// An event of a kind that counts.
    Event(notify::Event),
    /// Events may have been lost: why.
    Lost(String),
    /// The system's watch limit was reached: why.
    Limit(String),
}

/// A running watcher; dropping it stops watching.
#[derive(Debug)]
pub struct Watcher {
    _inner: Arc<Mutex<notify::RecommendedWatcher>>,
    watched: Vec<PathBuf>,
    /// Directories watched (of the budget).
    dirs: usize,
}

/// The watches of one watcher: each base recursively, and the directories
/// of ignore files outside the bases on their own.
#[derive(Debug, Clone)]
struct Watches {
    bases: Vec<PathBuf>,
    sources: Vec<PathBuf>,
}

impl Watches {
    fn set_up(&self, inner: &mut notify::RecommendedWatcher) -> Result<()> {
        let add = |inner: &mut notify::RecommendedWatcher, dir: &PathBuf, mode| {
            inner.watch(dir, mode).map_err(|source| Error::Watch { path: dir.clone(), source })
        };
        for base in &self.bases {
            add(inner, base, RecursiveMode::Recursive)?;
        }
        for dir in &self.sources {
            add(inner, dir, RecursiveMode::NonRecursive)?;
        }
        Ok(())
    }

    /// After lost events: every watch removed and, unless `stop`, added
    /// again.
    fn renew(&self, inner: &Weak<Mutex<notify::RecommendedWatcher>>, stop: bool) {
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let Ok(mut inner) = inner.lock() else {
            return;
        };
        for dir in self.bases.iter().chain(&self.sources) {
            let _ = inner.unwatch(dir);
        }
        if !stop {
            // What cannot be watched again now is reported by the next error.
            let _ = self.set_up(&mut inner);
        }
    }
}

impl Watcher {
    /// Starts watching and calls `on_change` once per burst, on a
    /// background thread; `decisions` hears about every path of every file
    /// event, counted or not, and `seen` of each change that counts as soon
    /// as it arrives.
    pub fn start<F>(
        config: &WatchConfig,
        on_change: F,
        decisions: Option<Decisions>,
        seen: Option<Seen>,
    ) -> Result<Self>
    where
        F: FnMut(Change) + Send + 'static,
    {
        let root = std::fs::canonicalize(&config.root).map_err(|source| Error::Watch {
            path: config.root.clone(),
            source: notify::Error::io(source),
        })?;
        let mut bases: BTreeSet<PathBuf> = BTreeSet::new();
        for pattern in &config.patterns {
            // A base climbing out of the checkout (`../x/**`) is not watched.
            if let Ok(base) =
                omnidev_pod::pod::relative_inside(&literal_base(pattern).to_string_lossy())
            {
                bases.insert(root.join(base));
            } else if literal_base(pattern).as_os_str().is_empty() {
                bases.insert(root.clone());
            }
        }
        // Watch the outermost existing bases only, inside the checkout even
        // after resolving links, within the budget.
        let mut watched: Vec<PathBuf> = Vec::new();
        let mut budget = config.max_watches;
        for base in bases {
            let inside = std::fs::canonicalize(&base).is_ok_and(|real| real.starts_with(&root));
            if !inside || !base.is_dir() || watched.iter().any(|w| base.starts_with(w)) {
                continue;
            }
            let Some(count) = count_dirs(&base, budget) else {
                return Err(Error::TooManyWatches {
                    patterns: config.patterns.join(", "),
                    limit: config.max_watches,
                });
            };
            budget -= count;
            watched.push(base);
        }
        let dirs = config.max_watches - budget;
        let mut tracker = Tracker::new(config, &root, watched.clone(), decisions.clone())?;
        tracker.seen = seen;
        let plan = Watches {
            sources: tracker.ignores.current().source_dirs(&watched),
            bases: watched.clone(),
        };
        let (tx, rx) = mpsc::channel::<Message>();
        let handler = move |res: notify::Result<notify::Event>| {
            let message = match res {
                Ok(event) if event.need_rescan() => {
                    Message::Lost("the system's queue of file events overflowed".to_owned())
                }
                Ok(event) if kind_counts(event.kind) => Message::Event(event),
                Ok(event) => {
                    if let Some(decisions) = &decisions {
                        for path in &event.paths {
                            decisions(path, event.kind, "does not count: not a content change");
                        }
                    }
                    return;
                }
                // Watching again would only hit the limit again, forever.
                Err(error) if is_limit(&error) => Message::Limit(format!(
                    "the system's limit of inotify watches was reached ({} = {})",
                    "fs.inotify.max_user_watches",
                    watch_limit().unwrap_or_default()
                )),
                Err(error) => Message::Lost(error.to_string()),
            };
            let _ = tx.send(message);
        };
        // Symbolic links are never followed: a link to `/usr` or `$HOME`
        // inside a watched directory would add thousands of watches on
        // files that are not the checkout's.
        let mut inner = notify::RecommendedWatcher::new(
            handler,
            notify::Config::default().with_follow_symlinks(false),
        )
        .map_err(|source| Error::Watch { path: root.clone(), source })?;
        let held = watches_held().unwrap_or(0);
        // Dropping `inner` on an error closes its descriptor: every watch
        // it added goes with it.
        plan.set_up(&mut inner)
            .map_err(|e| at_the_limit(e, config, dirs + plan.sources.len(), held))?;
        let inner = Arc::new(Mutex::new(inner));
        let weak = Arc::downgrade(&inner);
        let debounce = config.debounce;
        std::thread::Builder::new()
            .name("omnidev-watch".to_owned())
            .spawn(move || {
                run_bursts(&rx, tracker, debounce, |stop| plan.renew(&weak, stop), on_change);
            })
            .map_err(|source| Error::Watch {
                path: root.clone(),
                source: notify::Error::io(source),
            })?;
        Ok(Self { _inner: inner, watched, dirs })
    }

    /// The directories actually watched (bases of the patterns that exist).
    pub fn watched(&self) -> &[PathBuf] {
        &self.watched
    }

    /// How many directories it watches.
    pub fn dirs(&self) -> usize {
        self.dirs
    }
}

/// Starts one watcher per watch rule; each burst of changes reloads the
/// rule's service (its dependents follow, by the supervisor's rules).
/// Returns the watchers (dropping them stops watching) and a line per rule
/// saying what is watched.
pub fn start_watchers(
    prepared: &PreparedPod,
    debounce: Duration,
    debug: bool,
    supervisor: &Supervisor,
) -> Result<(Vec<Watcher>, Vec<String>)> {
    let mut notices = Vec::new();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Fired>();
    let mut watchers = Vec::new();
    // One budget for all the rules: each takes its directories from what
    // the ones before it left.
    let mut budget = watch_budget();
    // Paths are named relative to the checkout (as the watcher sees it).
    let root = std::fs::canonicalize(&prepared.checkout.repo)
        .unwrap_or_else(|_| prepared.checkout.repo.clone());
    let relative = move |path: &Path| -> String {
        path.strip_prefix(&root).unwrap_or(path).to_string_lossy().into_owned()
    };
    for rule in &prepared.rendered.watch {
        let tx = tx.clone();
        let service = rule.service.clone();
        let decisions: Option<Decisions> = debug.then(|| {
            let supervisor = supervisor.clone();
            let service = rule.service.clone();
            let relative = relative.clone();
            Arc::new(move |path: &Path, kind: EventKind, verdict: &str| {
                supervisor
                    .debug(format!("watch {service}: {} {kind:?}: {verdict}", relative(path)));
            }) as Decisions
        });
        let named = relative.clone();
        let seen = supervisor.clone();
        let service_coming = rule.service.clone();
        let started = Watcher::start(
            &WatchConfig {
                root: prepared.checkout.repo.clone(),
                patterns: rule.globs.clone(),
                debounce,
                max_watches: budget,
                excludes_file: excludes_file(),
            },
            move |change: Change| {
                let _ = tx.send(Fired {
                    service: service.clone(),
                    changes: Changes::of(change.paths.iter().map(|p| named(p))),
                    lost: change.lost,
                    gave_up: change.gave_up,
                });
            },
            decisions,
            Some(Arc::new(move |first| {
                // A wait for the reload of this change knows it is coming.
                seen.saw_change();
                // The burst's first change stops the service at once; the
                // burst's end starts it.
                if first {
                    let _ = seen.reload_coming(&[&service_coming]);
                }
            })),
        );
        let watcher = match started {
            Ok(watcher) => watcher,
            // The pod runs; only reloading this service is given up.
            Err(e @ Error::TooManyWatches { .. }) => {
                notices.push(format!(
                    "warning: {} is not reloaded on changes: {e}; narrow its `watch` globs",
                    rule.service
                ));
                continue;
            }
            Err(e @ Error::WatchLimit { suggested, .. }) => {
                notices.push(format!(
                    "warning: {} is not reloaded on changes: {e}; raise it (sudo sysctl \
                     fs.inotify.max_user_watches={suggested}) or narrow its `watch` globs",
                    rule.service
                ));
                continue;
            }
            Err(e) => return Err(e),
        };
        notices.push(if watcher.watched().is_empty() {
            format!(
                "warning: nothing to watch for {} ({} matches no directory)",
                rule.service,
                rule.globs.join(", ")
            )
        } else {
            format!(
                "{} reloads on changes to {} (debounce {})",
                rule.service,
                rule.globs.join(", "),
                omnidev_core::event::format_duration(debounce)
            )
        });
        budget -= watcher.dirs();
        watchers.push(watcher);
    }
    spawn_reloads(supervisor.clone(), rx);
    Ok((watchers, notices))
}

#[cfg(test)]
mod tests {
    use super::bursts::max_burst;
    use std::io::Read;
    use std::time::Instant;

    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
        root: PathBuf,
        rx: mpsc::Receiver<Change>,
        _watcher: Watcher,
    }

    fn fixture(debounce_ms: u64) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir_all(root.join("omnigent/api/__pycache__")).expect("mkdir");
        std::fs::create_dir_all(root.join("omnigent/generated")).expect("mkdir");
        std::fs::write(root.join(".gitignore"), "omnigent/generated/\n*_local.py\n")
            .expect("gitignore");
        std::fs::write(root.join("omnigent/app.py"), "print('hi')\n").expect("write");
        let (tx, rx) = mpsc::channel();
        let watcher = Watcher::start(
            &WatchConfig {
                root: root.clone(),
                patterns: vec!["omnigent/**/*.py".to_owned()],
                debounce: Duration::from_millis(debounce_ms),
                max_watches: 100,
                excludes_file: Some(root.join("global-ignore")),
            },
            move |paths| {
                let _ = tx.send(paths);
            },
            None,
            None,
        )
        .expect("watcher");
        assert_eq!(watcher.watched(), [root.join("omnigent")]);
        Fixture { dir, root, rx, _watcher: watcher }
    }

    impl Fixture {
        fn next_change(&self) -> Change {
            self.rx.recv_timeout(Duration::from_secs(20)).expect("a reload trigger within 20 s")
        }

        fn next_trigger(&self) -> Vec<PathBuf> {
            let change = self.next_change();
            assert_eq!(change.lost, None);
            change.paths
        }

        /// Proves that nothing was triggered before this point: a write to a
        /// fresh file must come back as the very next trigger, alone. inotify
        /// delivers events in order, so anything earlier would arrive first.
        fn assert_no_trigger_before_sentinel(&self) {
            let sentinel = self.root.join("omnigent/sentinel.py");
            std::fs::write(&sentinel, "x = 1\n").expect("sentinel");
            assert_eq!(self.next_trigger(), vec![sentinel]);
            assert!(self.dir.path().exists());
        }
    }

    #[test]
    fn one_write_is_one_trigger() {
        let fx = fixture(100);
        let file = fx.root.join("omnigent/app.py");
        std::fs::write(&file, "print('changed')\n").expect("write");
        assert_eq!(fx.next_trigger(), vec![file]);
        fx.assert_no_trigger_before_sentinel();
    }

    #[test]
    fn twenty_writes_in_100ms_are_one_trigger() {
        // A generous debounce keeps the burst whole on a loaded machine:
        // each write is closed, so the burst settles in a fifth of it.
        let debounce = Duration::from_secs(1);
        let fx = fixture(1000);
        let file = fx.root.join("omnigent/api/routes.py");
        let mut longest_pause = Duration::ZERO;
        for i in 0..20 {
            let before = Instant::now();
            std::fs::write(&file, format!("n = {i}\n")).expect("write");
            std::thread::sleep(Duration::from_millis(5));
            longest_pause = longest_pause.max(before.elapsed());
        }
        assert_eq!(fx.next_trigger(), vec![file]);
        if longest_pause < bursts::settle(debounce) {
            fx.assert_no_trigger_before_sentinel();
        }
    }

    /// A file held open after a write waits out the whole debounce (more
    /// writes may come); once closed, a fifth of it is enough.
    #[test]
    fn a_file_closed_after_writing_settles_before_the_debounce() {
        let debounce = Duration::from_secs(3);
        let fx = fixture(3000);
        let file = fx.root.join("omnigent/app.py");
        let mut open = std::fs::File::create(&file).expect("create");
        std::io::Write::write_all(&mut open, b"x = 1\n").expect("write");
        let written = Instant::now();
        assert_eq!(fx.next_trigger(), vec![file.clone()]);
        assert!(written.elapsed() >= debounce, "a file still open waits out the debounce");
        drop(open);
        let closed = Instant::now();
        assert_eq!(fx.next_trigger(), vec![file]);
        let waited = closed.elapsed();
        assert!(
            waited >= bursts::settle(debounce) && waited < debounce,
            "a closed file settles in a fifth of the debounce, not all of it ({waited:?})"
        );
    }

    /// Which last events leave a file whole, and a directory that came in
    /// keeps the burst from settling until it is scanned.
    #[test]
    fn a_burst_settles_once_each_file_is_whole() {
        use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, ModifyKind};
        let dir = tempfile::tempdir().expect("tempdir");
        let (_config, base, mut tracker) = src_tracker(dir.path());
        let (a, b) = (base.join("a.py"), base.join("b.py"));
        std::fs::write(&a, "").expect("write");
        std::fs::write(&b, "").expect("write");
        let event =
            |kind, path: &PathBuf| Message::Event(notify::Event::new(kind).add_path(path.clone()));
        let write = EventKind::Modify(ModifyKind::Data(DataChange::Content));
        let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
        let mut burst = classify::Burst::default();
        assert!(tracker.take(event(EventKind::Create(CreateKind::File), &a), &mut burst));
        assert!(!burst.settled(), "a new file may still be written");
        assert!(tracker.take(event(write, &a), &mut burst));
        assert!(tracker.take(event(closed, &a), &mut burst));
        assert!(burst.settled(), "closed after writing");
        assert!(tracker.take(event(write, &b), &mut burst));
        assert!(!burst.settled(), "b is being written");
        let renamed = EventKind::Modify(ModifyKind::Name(notify::event::RenameMode::To));
        assert!(tracker.take(event(renamed, &b), &mut burst));
        assert!(burst.settled(), "renamed into place");
        std::fs::create_dir(base.join("pkg")).expect("mkdir");
        assert!(
            tracker
                .take(event(EventKind::Create(CreateKind::Folder), &base.join("pkg")), &mut burst)
        );
        assert!(!burst.settled(), "a directory that came in is still to be scanned");
        tracker.scan_appeared(&mut burst);
        assert!(burst.settled());
        assert_eq!(burst.changed.into_iter().collect::<Vec<_>>(), vec![a, b]);
    }

    /// Writes that do not count (gitignored, `__pycache__`, unwatched) go
    /// on for 3 s after one that does: the trigger comes a debounce after
    /// the one that counts, not after the stream.
    #[test]
    fn writes_that_do_not_count_never_hold_a_trigger_back() {
        let fx = fixture(100);
        let file = fx.root.join("omnigent/app.py");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let noise = {
            let root = fx.root.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed)
                    && started.elapsed() < Duration::from_secs(3)
                {
                    for noise in [
                        "omnigent/generated/out.py",
                        "omnigent/api/__pycache__/routes.cpython-312.pyc",
                        "omnigent/notes.txt",
                    ] {
                        std::fs::write(root.join(noise), format!("{n}\n")).expect("noise");
                    }
                    n += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        std::fs::write(&file, "print('changed')\n").expect("write");
        let trigger = fx.next_trigger();
        let stream_went_on = !noise.is_finished();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let lasted = noise.join().expect("noise thread");
        assert_eq!(trigger, vec![file]);
        assert!(
            stream_went_on,
            "the trigger came only once the 3 s of other writes had ended ({lasted:?})"
        );
    }

    /// A file that counts rewritten every 20 ms for 6 s (longer than a
    /// 50 ms debounce's burst cap of 2 s): it still reloads while the
    /// writes go on, not only once they stop.
    #[test]
    fn changes_that_never_pause_still_trigger_once_per_burst_cap() {
        let fx = fixture(50);
        assert_eq!(max_burst(Duration::from_millis(50)), Duration::from_secs(2));
        let file = fx.root.join("omnigent/app.py");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let file = file.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed)
                    && started.elapsed() < Duration::from_secs(6)
                {
                    std::fs::write(&file, format!("n = {n}\n")).expect("write");
                    n += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        let trigger = fx.next_trigger();
        let writes_went_on = !writer.is_finished();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().expect("writer");
        assert_eq!(trigger, vec![file]);
        assert!(writes_went_on, "the trigger came only once 6 s of writes had ended");
    }

    #[test]
    fn reads_pycache_gitignored_and_other_files_do_not_trigger() {
        let fx = fixture(100);
        let mut content = String::new();
        std::fs::File::open(fx.root.join("omnigent/app.py"))
            .and_then(|mut f| f.read_to_string(&mut content))
            .expect("read");
        std::fs::write(fx.root.join("omnigent/api/__pycache__/app.cpython-311.pyc"), b"\0")
            .expect("pyc");
        std::fs::write(fx.root.join("omnigent/api/__pycache__/x.py"), b"").expect("py in cache");
        std::fs::write(fx.root.join("omnigent/generated/schema.py"), b"").expect("ignored dir");
        std::fs::write(fx.root.join("omnigent/settings_local.py"), b"").expect("ignored file");
        std::fs::write(fx.root.join("omnigent/notes.txt"), b"").expect("not python");
        fx.assert_no_trigger_before_sentinel();
    }

    #[test]
    fn remove_and_rename_trigger() {
        let fx = fixture(100);
        let file = fx.root.join("omnigent/app.py");
        let renamed = fx.root.join("omnigent/main.py");
        std::fs::rename(&file, &renamed).expect("rename");
        let paths = fx.next_trigger();
        assert!(paths.contains(&renamed), "{paths:?}");
        std::fs::remove_file(&renamed).expect("remove");
        assert_eq!(fx.next_trigger(), vec![renamed]);
    }

    /// A package directory with two modules and a data file.
    fn package(dir: &Path) -> Vec<PathBuf> {
        std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
        std::fs::write(dir.join("data.txt"), "x").expect("write");
        let files = vec![dir.join("__init__.py"), dir.join("sub/mod.py")];
        for file in &files {
            std::fs::write(file, "x = 1\n").expect("write");
        }
        files
    }

    #[test]
    fn a_directory_moved_in_out_and_within_changes_its_files() {
        let fx = fixture(100);
        let outside = tempfile::tempdir().expect("tempdir");
        let outside = std::fs::canonicalize(outside.path()).expect("canonical");
        package(&outside.join("pkg"));
        let inside = fx.root.join("omnigent/pkg");
        std::fs::rename(outside.join("pkg"), &inside).expect("move in");
        assert_eq!(fx.next_trigger(), vec![inside.join("__init__.py"), inside.join("sub/mod.py")]);
        fx.assert_no_trigger_before_sentinel();

        let renamed = fx.root.join("omnigent/api/pkg2");
        std::fs::rename(&inside, &renamed).expect("move within");
        let mut want = vec![
            inside.join("__init__.py"),
            inside.join("sub/mod.py"),
            renamed.join("__init__.py"),
            renamed.join("sub/mod.py"),
        ];
        want.sort();
        assert_eq!(fx.next_trigger(), want);
        fx.assert_no_trigger_before_sentinel();

        // The moved directory is watched under its new name.
        std::fs::write(renamed.join("sub/mod.py"), "x = 2\n").expect("write");
        assert_eq!(fx.next_trigger(), vec![renamed.join("sub/mod.py")]);

        std::fs::rename(&renamed, outside.join("back")).expect("move out");
        assert_eq!(
            fx.next_trigger(),
            vec![renamed.join("__init__.py"), renamed.join("sub/mod.py")]
        );
        fx.assert_no_trigger_before_sentinel();

        // A directory holding no matching file changes nothing.
        std::fs::create_dir_all(outside.join("assets/img")).expect("mkdir");
        std::fs::rename(outside.join("assets"), fx.root.join("omnigent/assets")).expect("mv");
        fx.assert_no_trigger_before_sentinel();
    }

    #[test]
    fn mkdir_and_an_immediate_write_is_one_trigger_every_time() {
        let fx = fixture(100);
        for i in 0..20 {
            let dir = fx.root.join(format!("omnigent/q{i}"));
            std::fs::create_dir(&dir).expect("mkdir");
            std::fs::write(dir.join("__init__.py"), "x = 1\n").expect("write");
            assert_eq!(fx.next_trigger(), vec![dir.join("__init__.py")], "round {i}");
        }
        fx.assert_no_trigger_before_sentinel();
    }

    #[test]
    fn ignore_rules_added_while_running_apply_at_once() {
        let fx = fixture(100);
        let nested = fx.root.join("omnigent/api/.gitignore");
        std::fs::write(&nested, "scratch.py\n").expect("nested gitignore");
        std::fs::create_dir_all(fx.root.join(".git/info")).expect("git dir");
        std::fs::write(fx.root.join(".git/info/exclude"), "mine.py\n").expect("exclude");
        std::fs::write(fx.root.join("global-ignore"), "*.bak.py\n").expect("global");
        // The rules are read in order with the writes that follow them.
        std::fs::write(fx.root.join("omnigent/api/scratch.py"), "").expect("write");
        std::fs::write(fx.root.join("omnigent/mine.py"), "").expect("write");
        std::fs::write(fx.root.join("omnigent/x.bak.py"), "").expect("write");
        fx.assert_no_trigger_before_sentinel();
        // The nested rule is api's only.
        std::fs::write(fx.root.join("omnigent/scratch.py"), "").expect("write");
        assert_eq!(fx.next_trigger(), vec![fx.root.join("omnigent/scratch.py")]);
        // Removing the rule brings the file back.
        std::fs::remove_file(&nested).expect("rm");
        std::fs::write(fx.root.join("omnigent/api/scratch.py"), "y").expect("write");
        assert_eq!(fx.next_trigger(), vec![fx.root.join("omnigent/api/scratch.py")]);
    }

    /// The config, base and tracker of `src/**/*.py` in `dir`.
    fn src_tracker(dir: &Path) -> (WatchConfig, PathBuf, Tracker) {
        let root = std::fs::canonicalize(dir).expect("canonical");
        let base = root.join("src");
        std::fs::create_dir_all(&base).expect("mkdir");
        let config = WatchConfig {
            root: root.clone(),
            patterns: vec!["src/**/*.py".to_owned()],
            debounce: Duration::from_millis(50),
            max_watches: 100,
            excludes_file: None,
        };
        let tracker = Tracker::new(&config, &root, vec![base.clone()], None).expect("tracker");
        (config, base, tracker)
    }

    #[test]
    fn lost_events_are_one_trigger_and_a_fresh_look() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (config, base, tracker) = src_tracker(dir.path());
        let (tx, rx) = mpsc::channel();
        // A file that appears while events are lost is known afterwards:
        // its removal then counts.
        std::fs::write(base.join("unseen.py"), "").expect("write");
        for _ in 0..3 {
            tx.send(Message::Lost("queue overflow".to_owned())).expect("send");
        }
        std::fs::remove_file(base.join("unseen.py")).expect("rm");
        let gone = notify::Event::new(EventKind::Remove(notify::event::RemoveKind::File))
            .add_path(base.join("unseen.py"));
        let (changes_tx, changes) = mpsc::channel();
        let renewed = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let renewed = &renewed;
            scope.spawn(move || {
                run_bursts(
                    &rx,
                    tracker,
                    config.debounce,
                    |stop| {
                        assert!(!stop, "lost events do not stop the watcher");
                        renewed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    },
                    |change| changes_tx.send(change).expect("send"),
                );
            });
            let first = changes.recv_timeout(Duration::from_secs(20)).expect("change");
            assert_eq!(
                first,
                Change { paths: vec![], lost: Some("queue overflow".to_owned()), gave_up: None }
            );
            tx.send(Message::Event(gone)).expect("send");
            let second = changes.recv_timeout(Duration::from_secs(20)).expect("change");
            assert_eq!(second.paths, vec![base.join("unseen.py")]);
            drop(tx);
        });
        assert_eq!(renewed.into_inner(), 1, "watches set up again once");
    }

    /// A loss, then the limit, in one burst: the loss still asks for its
    /// reload (its first change may have stopped the service ahead of it,
    /// which only that reload starts again).
    #[test]
    fn a_loss_before_the_watch_limit_still_reloads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (config, _, tracker) = src_tracker(dir.path());
        let (tx, rx) = mpsc::channel();
        tx.send(Message::Lost("overflow".to_owned())).expect("send");
        tx.send(Message::Limit("limit".to_owned())).expect("send");
        let mut changes = Vec::new();
        run_bursts(
            &rx,
            tracker,
            config.debounce,
            |_| {},
            |change| {
                changes.push(change);
            },
        );
        assert_eq!(
            changes,
            [Change {
                paths: vec![],
                lost: Some("overflow".to_owned()),
                gave_up: Some("limit".to_owned()),
            }]
        );
        drop(tx);
    }

    #[test]
    fn the_watch_limit_stops_the_watcher_once_and_for_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (config, _, tracker) = src_tracker(dir.path());
        let (tx, rx) = mpsc::channel();
        // The error notify reports for every directory it could not add.
        for _ in 0..50 {
            tx.send(Message::Limit("limit".to_owned())).expect("send");
        }
        let mut renewals = Vec::new();
        let mut changes = Vec::new();
        run_bursts(
            &rx,
            tracker,
            config.debounce,
            |stop| renewals.push(stop),
            |change| changes.push(change),
        );
        // It returned with the sender still there: the thread is done.
        assert_eq!(renewals, [true], "watches removed once, never set up again");
        assert_eq!(
            changes,
            [Change { paths: vec![], lost: None, gave_up: Some("limit".to_owned()) }]
        );
        drop(tx);
    }

    #[test]
    fn links_out_of_the_checkout_are_not_followed() {
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(outside.path().join("deep/er")).expect("mkdir");
        let fx = fixture(100);
        std::os::unix::fs::symlink(outside.path(), fx.root.join("omnigent/link")).expect("symlink");
        // The link is a new entry (an event, not a trigger: it is no .py);
        // a watcher started now must not follow it either.
        let (tx, rx) = mpsc::channel();
        let _again = Watcher::start(
            &WatchConfig {
                root: fx.root.clone(),
                patterns: vec!["omnigent/**/*.py".to_owned()],
                debounce: Duration::from_millis(100),
                // The checkout has 4 directories; the outside tree would
                // make 7.
                max_watches: 4,
                excludes_file: None,
            },
            move |paths| {
                let _ = tx.send(paths);
            },
            None,
            None,
        )
        .expect("the link is not counted");
        std::fs::write(outside.path().join("deep/er/evil.py"), "x = 1\n").expect("write");
        std::fs::write(outside.path().join("evil.py"), "x = 1\n").expect("write");
        fx.assert_no_trigger_before_sentinel();
        assert!(rx.recv_timeout(Duration::from_millis(500)).is_ok_and(|change: Change| {
            change.paths.iter().all(|p| !p.starts_with(outside.path()))
        }));
    }

    #[test]
    fn too_many_directories_are_refused_with_the_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        for i in 0..20 {
            std::fs::create_dir_all(dir.path().join(format!("src/d{i}"))).expect("mkdir");
        }
        let config = WatchConfig {
            root: dir.path().to_path_buf(),
            patterns: vec!["src/**/*.py".to_owned()],
            debounce: Duration::from_millis(100),
            max_watches: 10,
            excludes_file: None,
        };
        match Watcher::start(&config, |_| {}, None, None) {
            Err(e @ Error::TooManyWatches { limit: 10, .. }) => {
                assert!(e.to_string().contains("src/**/*.py"), "{e}");
            }
            other => panic!("expected TooManyWatches, got {other:?}"),
        }
        let config = WatchConfig { max_watches: 21, ..config };
        assert!(Watcher::start(&config, |_| {}, None, None).is_ok());
    }

    #[test]
    fn a_change_is_seen_as_it_arrives_before_its_burst_ends() {
        #[derive(Debug, PartialEq)]
        enum Heard {
            Seen { first: bool },
            Burst(Vec<PathBuf>),
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir_all(root.join("omnigent")).expect("mkdir");
        let (tx, rx) = mpsc::channel::<Heard>();
        let seen_tx = Mutex::new(tx.clone());
        let seen: Seen = Arc::new(move |first| {
            let _ = seen_tx.lock().expect("sender").send(Heard::Seen { first });
        });
        let _watcher = Watcher::start(
            &WatchConfig {
                root: root.clone(),
                patterns: vec!["omnigent/**/*.py".to_owned()],
                // The burst ends long after the change arrived.
                debounce: Duration::from_secs(2),
                max_watches: 100,
                excludes_file: None,
            },
            move |change: Change| {
                let _ = tx.send(Heard::Burst(change.paths));
            },
            None,
            Some(seen),
        )
        .expect("watcher");
        let file = root.join("omnigent/a.py");
        // Two bursts: each one's first change is told as the first.
        for round in 1..=2 {
            std::fs::write(&file, format!("x = {round}\n")).expect("write");
            let mut firsts = Vec::new();
            loop {
                match rx.recv_timeout(Duration::from_secs(20)).expect("told within 20 s") {
                    Heard::Burst(paths) => {
                        assert_eq!(paths, std::slice::from_ref(&file));
                        break;
                    }
                    Heard::Seen { first } => firsts.push(first),
                }
            }
            assert!(!firsts.is_empty(), "told of the change before its burst ended");
            assert!(
                firsts[0] && firsts[1..].iter().all(|first| !first),
                "only the burst's first change is its first: {firsts:?}"
            );
        }
    }

    #[test]
    fn decisions_say_why_a_change_does_not_count() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir_all(root.join("omnigent/__pycache__")).expect("mkdir");
        std::fs::write(root.join(".gitignore"), "*_local.py\n").expect("gitignore");
        let (tx, rx) = mpsc::channel::<(PathBuf, String)>();
        let tx = Mutex::new(tx);
        let decisions: Decisions = Arc::new(move |path, _kind, verdict| {
            let _ = tx.lock().expect("sender").send((path.to_path_buf(), verdict.to_owned()));
        });
        let (changes_tx, changes) = mpsc::channel();
        let _watcher = Watcher::start(
            &WatchConfig {
                root: root.clone(),
                patterns: vec!["omnigent/**/*.py".to_owned()],
                debounce: Duration::from_millis(100),
                max_watches: 100,
                excludes_file: None,
            },
            move |change: Change| {
                let _ = changes_tx.send(change.paths);
            },
            Some(decisions),
            None,
        )
        .expect("watcher");
        let cached = root.join("omnigent/__pycache__/a.cpython-312.pyc");
        let local = root.join("omnigent/settings_local.py");
        let notes = root.join("omnigent/notes.txt");
        let app = root.join("omnigent/app.py");
        for path in [&cached, &local, &notes, &app] {
            std::fs::write(path, "x = 1\n").expect("write");
        }
        assert_eq!(
            changes.recv_timeout(Duration::from_secs(20)).expect("a trigger"),
            vec![app.clone()]
        );
        let seen: Vec<_> = rx.try_iter().collect();
        // Each write is several events (create, modify, close); every
        // decision about a path says the same unless the kind alone
        // does not count.
        let verdicts = |path: &Path| -> BTreeSet<String> {
            seen.iter()
                .filter(|(p, _)| p == path)
                .map(|(_, verdict)| verdict.clone())
                .filter(|verdict| verdict != "does not count: not a content change")
                .collect()
        };
        let one = |verdict: &str| BTreeSet::from([verdict.to_owned()]);
        assert_eq!(verdicts(&cached), one("does not count: under __pycache__"));
        assert_eq!(verdicts(&local), one("does not count: ignored by git's ignore rules"));
        assert_eq!(verdicts(&notes), one("does not count: matches no watch glob"));
        assert_eq!(verdicts(&app), one("counts"));
    }

    #[test]
    fn literal_bases() {
        assert_eq!(literal_base("omnigent/**/*.py"), PathBuf::from("omnigent"));
        assert_eq!(literal_base("src/app/*.rs"), PathBuf::from("src/app"));
        assert_eq!(literal_base("**/*.py"), PathBuf::new());
        assert_eq!(literal_base("main.py"), PathBuf::new());
    }
}
