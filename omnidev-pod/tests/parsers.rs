//! Property tests of the parsers of omnidev's own files, which anything
//! may have written: the per-user registry (`pods.toml`), a pod's
//! `pod.toml` and its identity (`.omnidev-pod`). Whatever the input, they
//! never panic, and what they accept writes back to text that parses to the
//! same value (nothing is accepted that cannot round-trip).

use omnidev_pod::PodRecord;
use omnidev_pod::pod::Marker;
use omnidev_pod::ports::Registry;
use proptest::prelude::*;

/// Text that is often close to a real file: fragments of each format
/// glued together, plus arbitrary strings.
fn near_toml() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "pods = [",
        "\"/p\"",
        "\"rel\"",
        ", ",
        "]",
        "\n",
        "id = ",
        "\"0123456789abcdef0123456789abcdef\"",
        "dir = ",
        "\"/home/a/.cache/omnidev/x-1\"",
        "made = [\"logs\", \"data/db\"]",
        "made = [\"../x\"]",
        "repo = \"/src/app\"",
        "[ports]",
        "server = 6767",
        "vite = 70000",
        "pod-id = \"x\"",
        "# comment",
        "\u{0}",
        "\"\\u0000\"",
        "=",
        "[",
        "'",
        "x = 1",
    ]);
    prop_oneof![prop::collection::vec(pieces, 0..12).prop_map(|p| p.concat()), any::<String>(),]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn registry_round_trips_what_it_accepts(text in near_toml()) {
        if let Ok(registry) = Registry::parse(&text) {
            let written = toml::to_string(&registry).expect("serialise");
            prop_assert_eq!(Registry::parse(&written), Ok(registry));
        }
    }

    #[test]
    fn pod_record_round_trips_what_it_accepts(text in near_toml()) {
        if let Ok(record) = toml::from_str::<PodRecord>(&text) {
            let written = toml::to_string(&record).expect("serialise");
            prop_assert_eq!(toml::from_str::<PodRecord>(&written).expect("parse back"), record);
        }
    }

    #[test]
    fn marker_round_trips_what_it_accepts(text in near_toml()) {
        if let Some(marker) = Marker::parse(&text) {
            let written = marker.text().expect("text");
            prop_assert_eq!(Marker::parse(&written), Some(marker));
        }
    }

    #[test]
    fn a_registry_of_any_absolute_paths_round_trips(
        pods in prop::collection::btree_set("/[a-zA-Z0-9 ._\"'\\\\é-]{0,30}", 0..5)
    ) {
        let registry = Registry { pods: pods.into_iter().map(Into::into).collect() };
        let written = toml::to_string(&registry).expect("serialise");
        prop_assert_eq!(Registry::parse(&written), Ok(registry));
    }
}
