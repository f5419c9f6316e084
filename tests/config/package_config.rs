//! The package's config (`conf/deb/floodgate.toml`, installed as
//! /etc/floodgate/floodgate.toml) is the development config `conf/floodgate.toml` with the
//! paths of an installed system, and nothing else: the same settings, the same comments,
//! only the header and the path keys (with the comments that follow them) told otherwise.

use std::path::Path;

/// The keys whose values differ, with the package's value of each.
const PACKAGE_PATHS: [(&str, &str, &str); 6] = [
    ("tls", "certificate", "/etc/floodgate/tls/floodgate.crt"),
    ("tls", "private_key", "/etc/floodgate/tls/floodgate.key"),
    ("store", "path", "/var/lib/floodgate/state"),
    ("admin", "socket", "/run/floodgate/admin.sock"),
    ("hold", "dir", "/var/lib/floodgate/hold"),
    ("report", "events", "/var/lib/floodgate/events.jsonl"),
];

fn read(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The file's lines after its header comment, each with the indented comment lines that
/// continue it.
fn items(text: &str) -> Vec<Vec<&str>> {
    let mut items: Vec<Vec<&str>> = Vec::new();
    let body = text
        .lines()
        .skip_while(|l| l.is_empty() || l.starts_with('#'));
    for line in body {
        let continues = line.starts_with(' ') && line.trim_start().starts_with('#');
        match items.last_mut() {
            Some(item) if continues => item.push(line),
            _ => items.push(vec![line]),
        }
    }
    items
}

/// The path key an item sets, written or commented out (`# socket = ...`).
fn path_key(item: &[&str]) -> Option<&'static str> {
    let first = item[0].trim_start_matches("# ");
    let key = first.split(" = ").next()?.trim();
    PACKAGE_PATHS.iter().map(|(_, k, _)| *k).find(|k| *k == key)
}

#[test]
fn the_package_config_differs_from_the_development_one_only_in_its_paths() {
    let dev_text = read("conf/floodgate.toml");
    let deb_text = read("conf/deb/floodgate.toml");
    let (dev, deb) = (items(&dev_text), items(&deb_text));
    assert_eq!(
        dev.len(),
        deb.len(),
        "conf/deb/floodgate.toml has another shape than conf/floodgate.toml"
    );
    let mut differing = Vec::new();
    for (a, b) in dev.iter().zip(&deb) {
        if a == b {
            continue;
        }
        match (path_key(a), path_key(b)) {
            (Some(x), Some(y)) if x == y => differing.push(x),
            _ => panic!(
                "conf/floodgate.toml and conf/deb/floodgate.toml differ beyond their paths:\n{}\n---\n{}",
                a.join("\n"),
                b.join("\n")
            ),
        }
    }
    assert_eq!(
        differing,
        [
            "certificate",
            "private_key",
            "path",
            "socket",
            "dir",
            "events"
        ]
    );

    // As TOML: the package's paths are the installed system's, every other value is the
    // development config's.
    let mut dev: toml::Table = dev_text.parse().expect("conf/floodgate.toml");
    let mut deb: toml::Table = deb_text.parse().expect("conf/deb/floodgate.toml");
    for (section, key, value) in PACKAGE_PATHS {
        let deb_value = deb[section]
            .as_table_mut()
            .and_then(|t| t.remove(key))
            .unwrap_or_else(|| panic!("[{section}] {key} in conf/deb/floodgate.toml"));
        assert_eq!(deb_value.as_str(), Some(value), "[{section}] {key}");
        if let Some(t) = dev.get_mut(section).and_then(|s| s.as_table_mut()) {
            t.remove(key);
        }
    }
    assert_eq!(dev, deb);
}

#[test]
fn the_package_config_compiles() {
    let text = read("conf/deb/floodgate.toml");
    let g =
        floodgate::generation::Generation::parse(Path::new("/etc/floodgate/floodgate.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}"));
    let c = &g.config;
    assert_eq!(
        c.store.path.as_deref(),
        Some(Path::new("/var/lib/floodgate/state"))
    );
    assert_eq!(
        c.admin.socket.as_deref(),
        Some(Path::new("/run/floodgate/admin.sock"))
    );
    assert!(!c.admin.default_socket);
    assert_eq!(
        g.report.events.as_deref(),
        Some(Path::new("/var/lib/floodgate/events.jsonl"))
    );
    assert_eq!(
        g.hold.as_ref().map(|h| h.dir.as_path()),
        Some(Path::new("/var/lib/floodgate/hold"))
    );
}
