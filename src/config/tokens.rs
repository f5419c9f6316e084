//! `[admin] token_file` and `[admin.tokens]`: the named bearer tokens of the admin address.
//! Each file holds one token (one word of at least [`MIN_TOKEN_LEN`] characters), read when
//! the config is; `token_file`'s token is named by the file's stem (`admin.token` → `admin`).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::store::Secret;
use super::ConfigError;

/// The shortest bearer token accepted.
pub const MIN_TOKEN_LEN: usize = 16;
/// The longest token name.
pub const MAX_TOKEN_NAME: usize = 64;

/// `[admin.tokens]` as written: NAME = "FILE".
pub type RawTokens = BTreeMap<String, Spanned<PathBuf>>;

/// One bearer token of the admin address, with the name that actions taken with it are
/// recorded under (`token:NAME`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminToken {
    /// The token's name: letters, digits, `-`, `_`, `.`; 1 to [`MAX_TOKEN_NAME`] characters.
    pub name: String,
    /// The token.
    pub secret: Secret,
}

/// Whether `name` may name a token: 1 to [`MAX_TOKEN_NAME`] ASCII letters, digits, `-`,
/// `_` or `.`.
pub fn valid_name(name: &str) -> bool {
    (1..=MAX_TOKEN_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The tokens of `token_file` (named by its stem) and `tokens`, in the order written; `abs`
/// resolves a relative path. Refused, at the value's place: an unreadable file, a token
/// that is not one word of at least [`MIN_TOKEN_LEN`] characters, a bad name, a name given
/// twice (`token_file`'s stem included), and one token under two names.
pub fn read_tokens(
    token_file: Option<&Spanned<PathBuf>>,
    tokens: Option<&Spanned<RawTokens>>,
    abs: &dyn Fn(&Path) -> PathBuf,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
) -> Result<Vec<AdminToken>, ConfigError> {
    // (label, name, path as written, span) in the order of the config text.
    let mut written: Vec<(String, String, &Spanned<PathBuf>)> = Vec::new();
    if let Some(t) = token_file {
        let stem = t
            .get_ref()
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !valid_name(&stem) {
            return Err(at(
                t.span(),
                format!(
                    "[admin] token_file {}: its token is named by the file's stem {stem:?}, \
                     which is not a token name (1 to {MAX_TOKEN_NAME} letters, digits, '-', \
                     '_', '.'): rename the file or list it under [admin.tokens]",
                    t.get_ref().display()
                ),
            ));
        }
        written.push(("[admin] token_file".into(), stem, t));
    }
    if let Some(map) = tokens {
        if map.get_ref().is_empty() {
            return Err(at(
                map.span(),
                "[admin.tokens] is empty: give NAME = \"FILE\" lines, or remove the table".into(),
            ));
        }
        let mut entries: Vec<_> = map.get_ref().iter().collect();
        entries.sort_by_key(|(_, p)| p.span().start);
        for (name, path) in entries {
            if !valid_name(name) {
                return Err(at(
                    path.span(),
                    format!(
                        "[admin.tokens] {name:?} is not a token name: 1 to {MAX_TOKEN_NAME} \
                         letters, digits, '-', '_', '.'"
                    ),
                ));
            }
            written.push((format!("[admin.tokens] {name}"), name.clone(), path));
        }
    }
    let mut out: Vec<AdminToken> = Vec::with_capacity(written.len());
    for (label, name, path) in written {
        if out.iter().any(|t| t.name == name) {
            return Err(at(
                path.span(),
                format!(
                    "{label}: the token name {name:?} is given twice (token_file's token is \
                     named by its file's stem)"
                ),
            ));
        }
        let file = abs(path.get_ref());
        let text = std::fs::read_to_string(&file).map_err(|e| {
            at(
                path.span(),
                format!("{label} {}: cannot read: {e}", file.display()),
            )
        })?;
        let token = text.trim();
        if token.len() < MIN_TOKEN_LEN || token.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(at(
                path.span(),
                format!(
                    "{label} {}: the token must be one word of at least {MIN_TOKEN_LEN} characters",
                    file.display()
                ),
            ));
        }
        if let Some(same) = out.iter().find(|t| t.secret.expose() == token) {
            return Err(at(
                path.span(),
                format!(
                    "{label} {}: the same token as {:?}; each name needs its own token, or \
                     nobody can tell who acted",
                    file.display(),
                    same.name
                ),
            ));
        }
        out.push(AdminToken {
            name,
            secret: Secret::new(token.to_string()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    const BASE: &str =
        "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n\
                        [admin]\naddress = \"127.0.0.1:9466\"\n";

    /// A directory with token files `a.token` and `b.token` (different tokens), `same`
    /// (a's token) and `short`.
    fn files() -> tempfile::TempDir {
        let d = tempfile::TempDir::new().unwrap();
        std::fs::write(d.path().join("a.token"), "aaaaaaaaaaaaaaaaaaaa\n").unwrap();
        std::fs::write(d.path().join("b.token"), " bbbbbbbbbbbbbbbbbbbb \n").unwrap();
        std::fs::write(d.path().join("same"), "aaaaaaaaaaaaaaaaaaaa").unwrap();
        std::fs::write(d.path().join("short"), "abc\n").unwrap();
        d
    }

    fn parse(d: &tempfile::TempDir, extra: &str) -> Result<Config, ConfigError> {
        Config::parse(&d.path().join("f.toml"), &format!("{BASE}{extra}"))
    }

    #[test]
    fn named_tokens_and_the_token_file_in_the_order_written() {
        let d = files();
        let c = parse(
            &d,
            "token_file = \"a.token\"\n[admin.tokens]\nzed = \"b.token\"\n",
        )
        .unwrap();
        let (_, tokens) = c.admin.tcp.unwrap();
        let named: Vec<_> = tokens
            .iter()
            .map(|t| (t.name.as_str(), t.secret.expose()))
            .collect();
        assert_eq!(
            named,
            [
                ("a", "aaaaaaaaaaaaaaaaaaaa"),
                ("zed", "bbbbbbbbbbbbbbbbbbbb")
            ]
        );
        // [admin.tokens] alone, in the order of the text (not of the names).
        let c = parse(
            &d,
            "[admin.tokens]\nz = \"a.token\"\n\"on-call.1\" = \"b.token\"\n",
        )
        .unwrap();
        let names: Vec<_> = c.admin.tcp.unwrap().1.into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["z", "on-call.1"]);
    }

    #[test]
    fn bad_tokens_name_file_line_and_column() {
        let d = files();
        let f = d.path().join("f.toml");
        let f = f.display();
        let cases = [
            (
                "[admin.tokens]\nalice = \"a.token\"\nbob = \"same\"\n",
                "9:7",
                "[admin.tokens] bob",
                "the same token as \"alice\"",
            ),
            (
                "token_file = \"a.token\"\n[admin.tokens]\na = \"b.token\"\n",
                "9:5",
                "[admin.tokens] a",
                "the token name \"a\" is given twice",
            ),
            (
                "[admin.tokens]\n\"al ice\" = \"a.token\"\n",
                "8:12",
                "[admin.tokens] \"al ice\"",
                "is not a token name",
            ),
            (
                "[admin.tokens]\nalice = \"gone\"\n",
                "8:9",
                "[admin.tokens] alice",
                "cannot read",
            ),
            (
                "[admin.tokens]\nalice = \"short\"\n",
                "8:9",
                "[admin.tokens] alice",
                "one word of at least 16 characters",
            ),
            (
                "token_file = \"my token\"\n",
                "7:14",
                "[admin] token_file my token",
                "not a token name",
            ),
            ("[admin.tokens]\n", "7:1", "[admin.tokens] is empty", ""),
            ("[admin.tokens]\nalice = 3\n", "8:9", "invalid type", ""),
        ];
        for (extra, place, label, what) in cases {
            let e = parse(&d, extra).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{f}:{place}: ")), "{extra}: {e}");
            assert!(e.contains(label) && e.contains(what), "{extra}: {e}");
        }
        // Tokens without the address have nothing to guard.
        let e = Config::parse(
            &d.path().join("f.toml"),
            "[[listener]]\naddress = \"127.0.0.1:0\"\n[upstream]\naddress = \"127.0.0.1:25\"\n\
             [admin.tokens]\nalice = \"a.token\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with(&format!("{f}:5:1: ")), "{e}");
        assert!(e.contains("only used with address"), "{e}");
    }

    #[test]
    fn token_names() {
        for good in [
            "a",
            "alice",
            "ops-1",
            "on_call",
            "bob.smith",
            &"x".repeat(64),
        ] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "a b", "é", "a/b", "a:b", &"x".repeat(65), "tab\t"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
