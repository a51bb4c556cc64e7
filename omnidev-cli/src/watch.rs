//! The backend file watcher: content changes only, `__pycache__` and
//! gitignored files skipped, bursts coalesced into one trigger.
//!
//! Debouncing is trailing-edge: a trigger fires once no relevant change has
//! arrived for the debounce period, so 20 writes in 100 ms are one reload.
//! (notify-debouncer-full expires each event on its own timer and can split
//! such a burst into several batches, which would mean several reloads.)

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::{Override, OverrideBuilder};
use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher as _};

use omnidev_core::Supervisor;

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
}

/// Directories one watch rule may watch: half of the system's
/// `fs.inotify.max_user_watches` (the rest is left to editors and other
/// pods), or 4,096 when it cannot be read.
pub fn watch_budget() -> usize {
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
        .map_or(4096, |limit| limit / 2)
}

/// The directories under `dir` (itself included), not following symbolic
/// links; `None` once there are more than `limit`.
fn count_dirs(dir: &Path, limit: usize) -> Option<usize> {
    let mut count = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        count += 1;
        if count > limit {
            return None;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(std::result::Result::ok) {
            // file_type() does not follow a symbolic link.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    Some(count)
}

/// Decides which paths of a notify event count as a change.
#[derive(Debug)]
struct Filter {
    root: PathBuf,
    wanted: Override,
    ignored: Gitignore,
}

impl Filter {
    fn new(root: &Path, patterns: &[String]) -> Result<Self> {
        let glob_error = |pattern: &str, source: ignore::Error| Error::WatchPattern {
            pattern: pattern.to_owned(),
            source,
        };
        let mut wanted = OverrideBuilder::new(root);
        for pattern in patterns {
            wanted.add(pattern).map_err(|e| glob_error(pattern, e))?;
        }
        let wanted = wanted.build().map_err(|e| glob_error("", e))?;
        let mut ignored = GitignoreBuilder::new(root);
        for file in [root.join(".gitignore"), root.join(".git/info/exclude")] {
            if file.is_file() {
                // A broken line in .gitignore only loses that line.
                let _ = ignored.add(file);
            }
        }
        let ignored = ignored.build().unwrap_or_else(|_| Gitignore::empty());
        Ok(Self {
            root: root.to_path_buf(),
            wanted,
            ignored,
        })
    }

    fn kind_counts(kind: EventKind) -> bool {
        match kind {
            // Attribute changes (chmod, atime) are not content.
            EventKind::Modify(ModifyKind::Metadata(_)) => false,
            // Content: creation, removal, writes, renames; and a file opened
            // for writing being closed (`touch`, some editors).
            EventKind::Create(_)
            | EventKind::Remove(_)
            | EventKind::Modify(_)
            | EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            // Reads (Python imports open every module) and the rest.
            EventKind::Access(_) | EventKind::Any | EventKind::Other => false,
        }
    }

    fn path_counts(&self, path: &Path) -> bool {
        let Ok(relative) = path.strip_prefix(&self.root) else {
            return false;
        };
        if relative
            .components()
            .any(|c| c == Component::Normal("__pycache__".as_ref()))
        {
            return false;
        }
        let is_dir = path.is_dir();
        if !matches!(self.wanted.matched(relative, is_dir), Match::Whitelist(_)) {
            return false;
        }
        !self
            .ignored
            .matched_path_or_any_parents(relative, is_dir)
            .is_ignore()
    }

    fn relevant(&self, event: &notify::Event) -> Vec<PathBuf> {
        if !Self::kind_counts(event.kind) {
            return Vec::new();
        }
        event
            .paths
            .iter()
            .filter(|p| self.path_counts(p))
            .cloned()
            .collect()
    }
}

/// The directory a glob can only match under: its components up to the
/// first one holding a glob character.
fn literal_base(pattern: &str) -> PathBuf {
    let pattern = pattern.trim_start_matches('/');
    let mut base = PathBuf::new();
    let mut parts = pattern.split('/').peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() || part.contains(['*', '?', '[', '{', '!']) {
            break;
        }
        base.push(part);
    }
    base
}

/// A running watcher; dropping it stops watching.
#[derive(Debug)]
pub struct Watcher {
    _inner: notify::RecommendedWatcher,
    watched: Vec<PathBuf>,
}

impl Watcher {
    /// Starts watching and calls `on_change` with the changed paths once per
    /// burst, on a background thread.
    pub fn start<F>(config: &WatchConfig, mut on_change: F) -> Result<Self>
    where
        F: FnMut(Vec<PathBuf>) + Send + 'static,
    {
        let root = std::fs::canonicalize(&config.root).map_err(|source| Error::Watch {
            path: config.root.clone(),
            source: notify::Error::io(source),
        })?;
        let filter = Filter::new(&root, &config.patterns)?;
        let (tx, rx) = mpsc::channel::<Vec<PathBuf>>();
        let handler = move |res: notify::Result<notify::Event>| {
            if let Ok(event) = res {
                let paths = filter.relevant(&event);
                if !paths.is_empty() {
                    let _ = tx.send(paths);
                }
            }
        };
        // Symbolic links are never followed: a link to `/usr` or `$HOME`
        // inside a watched directory would add thousands of watches on
        // files that are not the checkout's.
        let mut inner = notify::RecommendedWatcher::new(
            handler,
            notify::Config::default().with_follow_symlinks(false),
        )
        .map_err(|source| Error::Watch {
            path: root.clone(),
            source,
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
            inner
                .watch(&base, RecursiveMode::Recursive)
                .map_err(|source| Error::Watch {
                    path: base.clone(),
                    source,
                })?;
            watched.push(base);
        }
        let debounce = config.debounce;
        std::thread::Builder::new()
            .name("omnidev-watch".to_owned())
            .spawn(move || {
                // Ends when the notify watcher (holding the sender) is dropped.
                while let Ok(first) = rx.recv() {
                    let mut batch: BTreeSet<PathBuf> = first.into_iter().collect();
                    loop {
                        match rx.recv_timeout(debounce) {
                            Ok(more) => batch.extend(more),
                            Err(mpsc::RecvTimeoutError::Timeout) => break,
                            Err(mpsc::RecvTimeoutError::Disconnected) => return,
                        }
                    }
                    on_change(batch.into_iter().collect());
                }
            })
            .map_err(|source| Error::Watch {
                path: root.clone(),
                source: notify::Error::io(source),
            })?;
        Ok(Self {
            _inner: inner,
            watched,
        })
    }

    /// The directories actually watched (bases of the patterns that exist).
    pub fn watched(&self) -> &[PathBuf] {
        &self.watched
    }
}

/// Starts one watcher per watch rule; each burst of changes reloads the
/// rule's service (its dependents follow, by the supervisor's rules).
/// Returns the watchers (dropping them stops watching) and a line per rule
/// saying what is watched.
pub fn start_watchers(
    prepared: &PreparedPod,
    debounce: Duration,
    supervisor: &Supervisor,
) -> Result<(Vec<Watcher>, Vec<String>)> {
    let mut notices = Vec::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut watchers = Vec::new();
    let max_watches = watch_budget();
    for rule in &prepared.rendered.watch {
        let tx = tx.clone();
        let service = rule.service.clone();
        let started = Watcher::start(
            &WatchConfig {
                root: prepared.checkout.repo.clone(),
                patterns: rule.globs.clone(),
                debounce,
                max_watches,
            },
            move |_paths| {
                let _ = tx.send(service.clone());
            },
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
        watchers.push(watcher);
    }
    let supervisor = supervisor.clone();
    tokio::spawn(async move {
        while let Some(service) = rx.recv().await {
            let mut services = vec![service];
            // Rules firing together are one reload.
            while let Ok(more) = rx.try_recv() {
                if !services.contains(&more) {
                    services.push(more);
                }
            }
            let names: Vec<&str> = services.iter().map(String::as_str).collect();
            // Fails only once the supervisor has shut down.
            if supervisor.reload(&names).await.is_err() {
                return;
            }
        }
    });
    Ok((watchers, notices))
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::time::Instant;

    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
        root: PathBuf,
        rx: mpsc::Receiver<Vec<PathBuf>>,
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
            },
            move |paths| {
                let _ = tx.send(paths);
            },
        )
        .expect("watcher");
        assert_eq!(watcher.watched(), [root.join("omnigent")]);
        Fixture {
            dir,
            root,
            rx,
            _watcher: watcher,
        }
    }

    impl Fixture {
        fn next_trigger(&self) -> Vec<PathBuf> {
            self.rx
                .recv_timeout(Duration::from_secs(20))
                .expect("a reload trigger within 20 s")
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
        // A generous debounce keeps the burst whole on a loaded machine.
        let fx = fixture(300);
        let file = fx.root.join("omnigent/api/routes.py");
        let started = Instant::now();
        for i in 0..20 {
            std::fs::write(&file, format!("n = {i}\n")).expect("write");
            std::thread::sleep(Duration::from_millis(5));
        }
        let burst = started.elapsed();
        assert_eq!(fx.next_trigger(), vec![file]);
        if burst < Duration::from_millis(300) {
            fx.assert_no_trigger_before_sentinel();
        }
    }

    #[test]
    fn reads_pycache_gitignored_and_other_files_do_not_trigger() {
        let fx = fixture(100);
        let mut content = String::new();
        std::fs::File::open(fx.root.join("omnigent/app.py"))
            .and_then(|mut f| f.read_to_string(&mut content))
            .expect("read");
        std::fs::write(
            fx.root.join("omnigent/api/__pycache__/app.cpython-311.pyc"),
            b"\0",
        )
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
            },
            move |paths| {
                let _ = tx.send(paths);
            },
        )
        .expect("the link is not counted");
        std::fs::write(outside.path().join("deep/er/evil.py"), "x = 1\n").expect("write");
        std::fs::write(outside.path().join("evil.py"), "x = 1\n").expect("write");
        fx.assert_no_trigger_before_sentinel();
        assert!(
            rx.recv_timeout(Duration::from_millis(500))
                .is_ok_and(|paths| { paths.iter().all(|p| !p.starts_with(outside.path())) })
        );
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
        };
        match Watcher::start(&config, |_| {}) {
            Err(e @ Error::TooManyWatches { limit: 10, .. }) => {
                assert!(e.to_string().contains("src/**/*.py"), "{e}");
            }
            other => panic!("expected TooManyWatches, got {other:?}"),
        }
        let config = WatchConfig {
            max_watches: 21,
            ..config
        };
        assert!(Watcher::start(&config, |_| {}).is_ok());
    }

    #[test]
    fn literal_bases() {
        assert_eq!(literal_base("omnigent/**/*.py"), PathBuf::from("omnigent"));
        assert_eq!(literal_base("src/app/*.rs"), PathBuf::from("src/app"));
        assert_eq!(literal_base("**/*.py"), PathBuf::new());
        assert_eq!(literal_base("main.py"), PathBuf::new());
    }
}
