//! The configuration reference (`docs/configuration/*.md`, one table of keys per section)
//! names exactly the keys of the configuration model. The model's keys are read from the
//! model itself: every section denies unknown keys, and serde's refusal of one lists the
//! keys the section has, so an unknown key is put into each section (and each table inside
//! one) of the shipped config in turn and `floodgate check` says what it expected.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// The key no section has.
const PROBE: &str = "zz_unknown_key";
/// The name given to a probed entry of a table of named entries (`[lists.NAME]`).
const NAMED: &str = "NAME";

/// The shipped config in a temporary directory beside a `certs` link, for probing.
struct Prober {
    dir: tempfile::TempDir,
    shipped: toml::Table,
}

impl Prober {
    fn new() -> Prober {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("conf")).unwrap();
        std::os::unix::fs::symlink(repo_root().join("certs"), dir.path().join("certs")).unwrap();
        let text = fs::read_to_string(repo_root().join("conf/floodgate.toml")).unwrap();
        Prober {
            dir,
            shipped: toml::from_str(&text).unwrap(),
        }
    }

    /// The keys `floodgate check` expects in the table at `path` (the first entry of an
    /// array of tables; tables made where missing, an array of one table where the model
    /// wants a sequence the shipped config leaves out), or `None` when that is no section
    /// of fixed keys (a value, or a table of free names).
    fn keys(&self, path: &[&str]) -> Option<BTreeSet<String>> {
        let stderr = self.probe(path, false);
        if stderr.contains("expected a sequence") {
            return expected(&self.probe(path, true));
        }
        expected(&stderr)
    }

    /// `floodgate check`'s refusal of the shipped config with the unknown key put in the
    /// table at `path`; a missing last part is made an array of one table when `array`.
    fn probe(&self, path: &[&str], array: bool) -> String {
        let mut config = self.shipped.clone();
        let mut table = &mut config;
        for (i, part) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            let entry = table.entry(part.to_string()).or_insert_with(|| {
                if array && last {
                    toml::Value::Array(vec![toml::Value::Table(toml::Table::new())])
                } else {
                    toml::Value::Table(toml::Table::new())
                }
            });
            // An array of tables is probed in its first entry, kept an array.
            let entry = match entry {
                toml::Value::Array(a) => {
                    if a.is_empty() {
                        a.push(toml::Value::Table(toml::Table::new()));
                    }
                    &mut a[0]
                }
                other => other,
            };
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            table = entry.as_table_mut().unwrap();
        }
        table.insert(PROBE.into(), toml::Value::Integer(1));
        self.check_refusal(path, &config)
    }

    /// The keys of an array of tables (`[[milter]]`) the shipped config has no entry of:
    /// probed in an entry of its own.
    fn array_keys(&self, section: &str) -> Option<BTreeSet<String>> {
        let mut config = self.shipped.clone();
        let mut entry = toml::Table::new();
        entry.insert(PROBE.into(), toml::Value::Integer(1));
        config.insert(
            section.into(),
            toml::Value::Array(vec![toml::Value::Table(entry)]),
        );
        expected(&self.check_refusal(&[section], &config))
    }

    /// What `floodgate check` refuses of `config` with the probe in `path`.
    fn check_refusal(&self, path: &[&str], config: &toml::Table) -> String {
        let file = self.dir.path().join("conf/floodgate.toml");
        fs::write(&file, toml::to_string(&config).unwrap()).unwrap();
        let out = run_with_timeout(
            Command::new(env!("CARGO_BIN_EXE_floodgate"))
                .args(["check", "--config"])
                .arg(&file),
            Duration::from_secs(60),
        );
        assert!(!out.ok(), "an unknown key in {path:?} passed check\n{out}");
        out.stderr
    }
}

/// The keys an unknown-key refusal names: "unknown field `x`, expected one of `a`, `b`"
/// (or "expected `a` or `b`", "expected `a`", "there are no fields").
fn expected(stderr: &str) -> Option<BTreeSet<String>> {
    let after = stderr.split_once(&format!("unknown field `{PROBE}`, "))?.1;
    let line = after.lines().next().unwrap_or("");
    if line.starts_with("there are no fields") {
        return Some(BTreeSet::new());
    }
    Some(
        line.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

#[test]
fn refusals_are_read_for_their_keys() {
    let one = expected("f:1:1: unknown field `zz_unknown_key`, expected `file` or `entries`\n");
    assert_eq!(
        one.unwrap().into_iter().collect::<Vec<_>>(),
        ["entries", "file"]
    );
    let many = expected("unknown field `zz_unknown_key`, expected one of `a`, `b`, `c`");
    assert_eq!(many.unwrap().len(), 3);
    assert_eq!(
        expected("invalid type: integer `1`, expected a string"),
        None
    );
}

/// The model's sections (`server`, `upstream.high_risk`, `lists.NAME`) and their keys.
fn model() -> BTreeMap<String, BTreeSet<String>> {
    let p = Prober::new();
    let top = p.keys(&[]).expect("the top level refuses an unknown key");
    assert!(top.contains("server") && top.contains("limit"), "{top:?}");
    let mut out = BTreeMap::new();
    for section in &top {
        match p.keys(&[section]) {
            Some(keys) => {
                for key in &keys {
                    if let Some(inner) = p.keys(&[section, key]) {
                        out.insert(format!("{section}.{key}"), inner);
                    }
                }
                out.insert(section.clone(), keys);
            }
            // A table of named entries, each a section of its own.
            None => {
                if let Some(inner) = p.keys(&[section, NAMED]) {
                    out.insert(format!("{section}.{NAMED}"), inner);
                } else if let Some(keys) = p.array_keys(section) {
                    out.insert(section.clone(), keys);
                }
            }
        }
    }
    out
}

/// The reference's sections and the keys of their tables: a table whose header's first
/// cell is `key` lists, one a row, the keys of the section the nearest heading above it
/// names (`` `[upstream.high_risk]` ``, `` `[[limit]]` ``).
fn reference(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        let mut section: Option<String> = None;
        let mut in_keys = false;
        for line in text.lines() {
            if line.starts_with('#') {
                section = line
                    .split('`')
                    .nth(1)
                    .filter(|s| s.starts_with('['))
                    .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_string());
                in_keys = false;
                continue;
            }
            let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
            if !line.starts_with('|') {
                in_keys = false;
                continue;
            }
            if cells[0].trim() == "key" {
                in_keys = true;
                let s = section
                    .clone()
                    .unwrap_or_else(|| panic!("{}: a key table under no section", file.display()));
                out.entry(s).or_default();
                continue;
            }
            if in_keys && !cells[0].trim().starts_with("---") {
                let key = cells[0].trim().trim_matches('`').to_string();
                out.get_mut(section.as_ref().unwrap()).unwrap().insert(key);
            }
        }
    }
    out
}

#[test]
fn the_reference_names_every_key_of_the_model_and_no_other() {
    let model = model();
    assert!(model.len() >= 18, "{model:?}");
    let reference = reference(&repo_root().join("docs/configuration"));
    let mut wrong = Vec::new();
    for (section, keys) in &model {
        let Some(documented) = reference.get(section) else {
            wrong.push(format!(
                "[{section}] has no table of keys in docs/configuration/ (its keys: {keys:?})"
            ));
            continue;
        };
        for k in keys.difference(documented) {
            wrong.push(format!("[{section}] {k}: not in the reference"));
        }
        for k in documented.difference(keys) {
            wrong.push(format!(
                "[{section}] {k}: in the reference, not in the model"
            ));
        }
    }
    for section in reference.keys().filter(|s| !model.contains_key(*s)) {
        wrong.push(format!("[{section}]: in the reference, not in the model"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
