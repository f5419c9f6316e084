//! The config text kept with the parsed config, so that sections checked later (when the
//! runtime generation is compiled) still name the file, line and column of an error.

use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use super::ConfigError;

/// The text a config was read from.
#[derive(Clone)]
pub(super) struct Source(Arc<str>);

impl Source {
    /// Keeps `text`.
    pub(super) fn new(text: &str) -> Source {
        Source(text.into())
    }

    /// The text itself.
    pub(super) fn text(&self) -> &str {
        &self.0
    }

    /// An error at `span` of this text, in the file `path`.
    pub(super) fn error_at(&self, path: &Path, span: Range<usize>, message: String) -> ConfigError {
        Source::locate(&self.0, path, span, message)
    }

    /// An error at `span` of `text`, in the file `path`.
    pub(super) fn locate(
        text: &str,
        path: &Path,
        span: Range<usize>,
        message: String,
    ) -> ConfigError {
        let (line, column) = line_col(text, span.start);
        ConfigError::Invalid {
            path: path.to_path_buf(),
            line,
            column,
            message,
        }
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes of config text>", self.0.len())
    }
}

/// 1-based line and column (in bytes) of `offset` in `text`; past the end, the end.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(text: &str, at: usize) -> (usize, usize) {
        match Source::new(text).error_at(Path::new("f.toml"), at..at, String::new()) {
            ConfigError::Invalid { line, column, .. } => (line, column),
            ConfigError::Read { .. } => unreachable!("error_at only places"),
        }
    }

    #[test]
    fn places_by_line_and_column() {
        assert_eq!(place("", 0), (1, 1));
        assert_eq!(place("ab\ncd\n", 0), (1, 1));
        assert_eq!(place("ab\ncd\n", 1), (1, 2));
        assert_eq!(place("ab\ncd\n", 3), (2, 1));
        assert_eq!(place("ab\ncd\n", 4), (2, 2));
        assert_eq!(place("ab\ncd\n", 6), (3, 1));
        // Past the end: the end.
        assert_eq!(place("ab", 99), (1, 3));
        assert_eq!(
            format!("{:?}", Source::new("abc")),
            "<3 bytes of config text>"
        );
    }
}
