//! Where a key of a plain section is written in the config text: for errors found after
//! parsing (a path that cannot be used, a file that cannot be read) to name the line and
//! column of the value at fault.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

use super::Config;

/// Each key of a section with the span of its value.
type Keys = BTreeMap<String, Spanned<IgnoredAny>>;

/// The sections whose keys name files, read again from the text for their spans (every
/// other section, and the arrays of tables, are skipped).
#[derive(Default, Deserialize)]
#[serde(default)]
struct Written {
    store: Keys,
    report: Keys,
    hold: Keys,
    admin: Keys,
    alerts: Keys,
    tls: Keys,
    upstream: Keys,
    outcomes: Keys,
    postfix: Keys,
}

impl Written {
    fn section(&self, name: &str) -> Option<&Keys> {
        Some(match name {
            "store" => &self.store,
            "report" => &self.report,
            "hold" => &self.hold,
            "admin" => &self.admin,
            "alerts" => &self.alerts,
            "tls" => &self.tls,
            "upstream" => &self.upstream,
            "outcomes" => &self.outcomes,
            "postfix" => &self.postfix,
            _ => return None,
        })
    }
}

impl Config {
    /// The span of the value of `key` in `[section]` (one of `store`, `report`, `hold`,
    /// `admin`, `alerts`, `tls`, `upstream`, `outcomes`, `postfix`); `0..0` (line 1, column 1: the
    /// file as a whole) when it is not written there.
    pub fn key_span(&self, section: &str, key: &str) -> Range<usize> {
        // The text parsed once already as the whole config, so it parses here too.
        let written: Written = toml::from_str(self.source.text()).unwrap_or_default();
        written
            .section(section)
            .and_then(|keys| keys.get(key))
            .map_or(0..0, Spanned::span)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{Config, ConfigError};

    const TEXT: &str = "[[listener]]\naddress = \"127.0.0.1:0\"\n\
        [upstream]\naddress = \"127.0.0.1:25\"\nca_file = \"ca.pem\"\n\
        [store]\n  path   = \"state\"\n\
        [report]\nevents = \"ev.jsonl\"\n\
        [[limit]]\nratelimit = \"1 / 1h\"\n";

    fn place(section: &str, key: &str) -> (usize, usize) {
        let c = Config::parse(Path::new("/etc/fg/f.toml"), TEXT).unwrap();
        match c.error_at(c.key_span(section, key), String::new()) {
            ConfigError::Invalid { line, column, .. } => (line, column),
            ConfigError::Read { .. } => unreachable!("error_at only places"),
        }
    }

    #[test]
    fn names_the_line_and_column_of_the_value() {
        assert_eq!(place("store", "path"), (7, 12));
        assert_eq!(place("report", "events"), (9, 10));
        assert_eq!(place("upstream", "ca_file"), (5, 11));
        // Not written, or not a section searched: the file as a whole.
        assert_eq!(place("hold", "dir"), (1, 1));
        assert_eq!(place("limit", "ratelimit"), (1, 1));
    }
}
