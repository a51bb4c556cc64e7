//! What `omnidev events` and `attach` read of a running pod: core's
//! history of its lines and events ([`omnidev_core::history`]), which
//! every reader reads through a cursor of its own, filtered and encoded as
//! records here, [`REPLAY_CHUNK`] bytes at a time as the reader takes them.
//! A reader costs the pod that chunk, whether it reads fast, slowly or not
//! at all; one behind what is kept is told exactly what it missed.

use std::time::SystemTime;

use omnidev_core::history::{Cursor, History, Kept};

use super::events::Encoder;
use super::protocol::EventsQuery;
use omnidev_core::text::json_line;

/// Bytes of records a reader takes at a time (about; and the last one).
pub const REPLAY_CHUNK: usize = 64 * 1024;

/// Which records a reader wants: its request's query as it came (its
/// services, replicas named by their service already), `since-ms`
/// counted back from when it was asked.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    query: EventsQuery,
    since: Option<SystemTime>,
}

/// What a reader got from one [`Filter::read`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    /// Records were added to the buffer (when not, it has read everything
    /// so far).
    pub any: bool,
    /// It has read everything it will get.
    pub done: bool,
}

impl Filter {
    /// The filter of `query`, asked at `now`.
    pub fn new(query: EventsQuery, now: SystemTime) -> Self {
        let back = |ms| now.checked_sub(std::time::Duration::from_millis(ms));
        Self { since: query.since_ms.and_then(back), query }
    }

    /// The services whose records it wants (all when empty).
    pub fn services(&self) -> &[String] {
        &self.query.services
    }

    /// Whether it wants `kept`.
    fn wants(&self, kept: &Kept) -> bool {
        let services = &self.query.services;
        (self.query.logs || matches!(kept, Kept::Event(_)))
            && self.since.is_none_or(|since| kept.at() >= since)
            && (services.is_empty()
                || kept.service().is_none_or(|s| services.iter().any(|want| want == s)))
    }

    /// A cursor at the first record it wants of `history`: a replay of
    /// what is kept, or with `follow`, of everything from there on.
    pub fn cursor(&self, history: &History, follow: bool) -> Cursor {
        history.cursor(self.query.since_reload, follow)
    }

    /// Appends the next records it wants from `cursor` on to `buf`, as
    /// JSON lines, after a `lost` record of exactly what was dropped before
    /// it read them, if anything was.
    pub fn read(
        &self,
        history: &History,
        cursor: &mut Cursor,
        encoder: &Encoder,
        buf: &mut Vec<u8>,
    ) -> Chunk {
        let partial = self.query.logs && self.query.partial;
        let read = history.read(cursor, REPLAY_CHUNK, partial, |kept| self.wants(kept));
        let lost = read.lost(self.query.logs);
        if let Some(lost) = &lost {
            let record = encoder.record(SystemTime::now(), None, lost.clone());
            buf.extend_from_slice(json_line(&record).as_bytes());
        }
        for kept in &read.kept {
            buf.extend_from_slice(json_line(&encoder.event(kept.event())).as_bytes());
        }
        Chunk { any: lost.is_some() || !read.kept.is_empty(), done: read.done }
    }
}

/// Hands memory freed by a stream that ended back to the system: the
/// allocator keeps freed blocks in per-thread arenas otherwise, and a pod
/// whose followers left would stay as big as it was while they stalled.
pub fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Every record `filter` wants of `supervisor`'s history, as JSON.
    fn replay(supervisor: &omnidev_core::Supervisor, filter: &Filter) -> Vec<serde_json::Value> {
        let encoder = Encoder::new(std::path::Path::new("/pod"));
        let mut cursor = filter.cursor(supervisor.history(), false);
        let mut buf = Vec::new();
        while !filter.read(supervisor.history(), &mut cursor, &encoder, &mut buf).done {}
        String::from_utf8(buf)
            .expect("utf-8")
            .lines()
            .map(|line| serde_json::from_str(line).expect("a record"))
            .collect()
    }

    /// A reader gets the records of the services it names (and the pod's
    /// own), log lines only when it asks, as the schema's records.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_gets_the_records_it_asks_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let service = |name: &str| {
            omnidev_core::ServiceSpec::new(
                name,
                "sh",
                ["-c", &format!("echo {name}; exec sleep 100")],
                dir.path(),
            )
        };
        let supervisor = omnidev_core::Supervisor::builder(omnidev_core::SupervisorConfig {
            services: vec![service("server"), service("host")],
            ..omnidev_core::SupervisorConfig::default()
        })
        .expect("a valid graph")
        .run()
        .await
        .expect("supervisor");
        supervisor.notice("between");
        let logs = EventsQuery { logs: true, ..EventsQuery::default() };
        let filter = |query: &EventsQuery| Filter::new(query.clone(), SystemTime::now());
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while replay(&supervisor, &filter(&logs)).iter().filter(|r| r["kind"] == "log").count() < 2
        {
            assert!(std::time::Instant::now() < deadline, "no lines");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let lines = |records: &[serde_json::Value]| -> Vec<String> {
            records
                .iter()
                .filter(|r| r["kind"] == "log")
                .map(|r| format!("{} {}", r["service"], r["line"]))
                .collect()
        };
        let all = replay(&supervisor, &filter(&logs));
        assert_eq!(lines(&all).len(), 2, "{all:?}");
        assert!(all.iter().any(|r| r["message"] == "between"));
        assert_eq!(all[0]["pod"], "/pod");
        let server = replay(
            &supervisor,
            &filter(&EventsQuery { services: vec!["server".into()], ..logs.clone() }),
        );
        assert_eq!(lines(&server), [r#""server" "server""#]);
        assert!(server.iter().all(|r| r["service"] != "host"), "{server:?}");
        assert!(server.iter().any(|r| r["message"] == "between"), "the pod's own");
        let events = replay(&supervisor, &Filter::default());
        assert!(lines(&events).is_empty(), "{events:?}");
        assert!(events.iter().any(|r| r["kind"] == "state"));
        supervisor.shutdown().await.expect("shutdown");
    }
}
