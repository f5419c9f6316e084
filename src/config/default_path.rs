//! Which config file a command uses when it is given no `--config`: the development tree's
//! `conf/floodgate.toml` when the working directory has one (`cargo run` in the repository),
//! else the one a package installs, `/etc/floodgate/floodgate.toml`.

use std::path::{Path, PathBuf};

/// The development tree's config, relative to the working directory.
pub const LOCAL_CONFIG: &str = "conf/floodgate.toml";

/// The config a package installs.
pub const SYSTEM_CONFIG: &str = "/etc/floodgate/floodgate.toml";

/// None of the config files looked for exists.
#[derive(Debug, thiserror::Error)]
#[error(
    "no config file: none of {} exists (a relative path is taken from the working directory); give --config FILE",
    list(.tried)
)]
pub struct NoConfigFile {
    /// The files looked for, in order.
    pub tried: Vec<PathBuf>,
}

fn list(tried: &[PathBuf]) -> String {
    let names: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}

/// The config file to use without `--config`: [`LOCAL_CONFIG`], else [`SYSTEM_CONFIG`].
pub fn default_config() -> Result<PathBuf, NoConfigFile> {
    first_present(&[Path::new(LOCAL_CONFIG), Path::new(SYSTEM_CONFIG)])
}

/// The first of `candidates` that exists (a relative one from the working directory).
pub fn first_present(candidates: &[&Path]) -> Result<PathBuf, NoConfigFile> {
    candidates
        .iter()
        .find(|p| p.exists())
        .map(|p| p.to_path_buf())
        .ok_or_else(|| NoConfigFile {
            tried: candidates.iter().map(|p| p.to_path_buf()).collect(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_present_file_wins_and_none_names_every_one() {
        let d = tempfile::tempdir().unwrap();
        let local = d.path().join("conf/floodgate.toml");
        let system = d.path().join("etc/floodgate.toml");
        let both = [local.as_path(), system.as_path()];
        let e = first_present(&both).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "no config file: none of {}, {} exists (a relative path is taken from the working directory); give --config FILE",
                local.display(),
                system.display()
            )
        );
        std::fs::create_dir_all(system.parent().unwrap()).unwrap();
        std::fs::write(&system, "").unwrap();
        assert_eq!(first_present(&both).unwrap(), system);
        std::fs::create_dir_all(local.parent().unwrap()).unwrap();
        std::fs::write(&local, "").unwrap();
        assert_eq!(first_present(&both).unwrap(), local);
        assert_eq!(LOCAL_CONFIG, "conf/floodgate.toml");
        assert_eq!(SYSTEM_CONFIG, "/etc/floodgate/floodgate.toml");
    }
}
