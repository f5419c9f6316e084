//! Any config text either validates and compiles or gives an error naming a line and column
//! within the text; it never panics.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(floodgate::config::ConfigError::Invalid { line, column, .. }) =
        floodgate::generation::Generation::parse(Path::new("/fuzz/floodgate.toml"), text)
    {
        let lines = text.split('\n').count();
        assert!(line >= 1 && line <= lines.max(1), "line {line} of {lines}");
        assert!(column >= 1);
    }
});
