//! Property test of the `state.json` parser, which reads a file anything
//! may have written: whatever the bytes, it never panics, and what it
//! accepts is written back (by the one writer) to a file that reads as the
//! same value.

use omnidev_core::state::{read_state, write_state};
use proptest::prelude::*;

/// Text often close to a real `state.json`: its fragments glued together,
/// plus arbitrary strings.
fn near_json() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"version\"",
        "1",
        "\"supervisor\"",
        "{\"pid\": 1, \"start-time\": 5}",
        "\"guard-pid\"",
        "null",
        "\"services\"",
        "\"server\"",
        "\"pid\"",
        "\"pgid\"",
        "-3",
        "\"start-time\"",
        "\"state\"",
        "\"running\"",
        "\"stopped\"",
        "{\"kind\": \"process-groups\", \"reason\": \"x\"}",
        "\"containment\"",
        "\"cgroup\"",
        "\"/sys/fs/cgroup/omnidev-1/0-server\"",
        "\"restarts\"",
        "4294967296",
        "\"ready\"",
        "true",
        "\"service-id\"",
        "\"\\u0000\"",
        "1e3",
        "\"extra\"",
    ]);
    prop_oneof![prop::collection::vec(pieces, 0..24).prop_map(|p| p.concat()), any::<String>(),]
}

/// A structurally valid `state.json` with arbitrary values (names, pids,
/// states, extra keys), so the accepting path is exercised too.
fn valid_json() -> impl Strategy<Value = String> {
    let state = prop_oneof![
        Just("{\"state\": \"waiting\"}".to_owned()),
        any::<u32>().prop_map(|pid| format!("{{\"state\": \"ready\", \"pid\": {pid}}}")),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(secs, nanos, attempt)| format!(
            "{{\"state\": \"restarting\", \"after\": {{\"secs\": {secs}, \"nanos\": {nanos}}}, \"attempt\": {attempt}}}"
        )),
        (any::<u64>(), any::<u32>()).prop_map(|(ms, attempt)| format!(
            "{{\"state\": \"restarting\", \"backoff-ms\": {ms}, \"attempt\": {attempt}}}"
        )),
    ];
    let service = (any::<String>(), any::<Option<u32>>(), any::<Option<i32>>(), state, any::<u32>(), any::<bool>())
        .prop_map(|(name, pid, pgid, state, restarts, ready)| {
            let opt = |v: Option<String>| v.unwrap_or_else(|| "null".to_owned());
            format!(
                "{}: {{\"pid\": {}, \"pgid\": {}, \"start-time\": null, \"state\": {state}, \"restarts\": {restarts}, \"ready\": {ready}, \"unknown\": 1}}",
                serde_json::to_string(&name).expect("name"),
                opt(pid.map(|p| p.to_string())),
                opt(pgid.map(|p| p.to_string())),
            )
        });
    (any::<u32>(), any::<u32>(), prop::collection::vec(service, 0..4)).prop_map(|(version, pid, services)| {
        format!(
            "{{\"version\": {version}, \"supervisor\": {{\"pid\": {pid}, \"start-time\": 7}}, \"guard-pid\": null, \"services\": {{{}}}}}",
            services.join(", ")
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn state_round_trips_what_it_accepts(text in prop_oneof![near_json(), valid_json()]) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        std::fs::write(&path, &text).expect("write");
        if let Ok(Some(state)) = read_state(&path) {
            write_state(&path, &state).expect("write back");
            prop_assert_eq!(read_state(&path).expect("read back"), Some(state));
        }
    }

    #[test]
    fn a_well_formed_state_is_accepted_whatever_its_values(text in valid_json()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        std::fs::write(&path, &text).expect("write");
        prop_assert!(matches!(read_state(&path), Ok(Some(_))), "{}", text);
    }

    #[test]
    fn a_link_in_place_of_the_state_file_is_refused(text in valid_json()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, &text).expect("write");
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("state.json")).expect("symlink");
        prop_assert!(read_state(&dir.path().join("state.json")).is_err());
    }
}
