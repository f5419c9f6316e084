//! Man pages and shell completions, for packages: `floodgate generate-docs DIR` writes
//! `DIR/man/*.1` from the command line's definition (`floodgate.1` and one page per
//! subcommand at every level, `floodgate-check.1`, `floodgate-held-list.1` …),
//! `DIR/man/floodgate.toml.5` from the book's configuration reference ([`man5`]), and
//! `DIR/completions/` (bash, zsh, fish).

pub mod man5;

use std::path::{Path, PathBuf};

use clap_complete::Shell;

/// Why the pages could not be written.
#[derive(Debug, thiserror::Error)]
pub enum DocsError {
    /// A directory or file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DocsError + '_ {
    move |source| DocsError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The shells completions are written for, and their file names for a program `bin`.
pub fn completion_files(bin: &str) -> [(Shell, String); 3] {
    [
        (Shell::Bash, bin.to_string()),
        (Shell::Zsh, format!("_{bin}")),
        (Shell::Fish, format!("{bin}.fish")),
    ]
}

/// The name of the configuration's man page, written beside the command pages.
pub const CONFIG_PAGE: &str = "floodgate.toml.5";

/// Writes the man pages of `cmd` and of each of its visible subcommands, at every level,
/// into `dir/man` with [`CONFIG_PAGE`], and its completions into `dir/completions`; returns
/// the files written.
pub fn generate(cmd: &clap::Command, dir: &Path) -> Result<Vec<PathBuf>, DocsError> {
    // Without clap's `help` subcommands, whose pages would say nothing: no page names a
    // `floodgate-help(1)` that is not there.
    let mut cmd = without_help(cmd.clone());
    cmd.build();
    let bin = cmd.get_name().to_string();
    let man = dir.join("man");
    let comp = dir.join("completions");
    for d in [&man, &comp] {
        std::fs::create_dir_all(d).map_err(io(d))?;
    }
    let mut written = Vec::new();
    let mut page = |c: &clap::Command, name: &str, usage: &str| -> Result<(), DocsError> {
        let path = man.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(c.clone().bin_name(usage.to_string()))
            .title(name.to_string())
            .render(&mut out)
            .map_err(io(&path))?;
        std::fs::write(&path, out).map_err(io(&path))?;
        written.push(path);
        Ok(())
    };
    // Each page names its subcommands' pages (`floodgate-held-list(1)`): every one is
    // written, depth first.
    let mut todo = vec![(&cmd, bin.clone(), bin.clone())];
    while let Some((c, name, usage)) = todo.pop() {
        page(c, &name, &usage)?;
        let subs: Vec<_> = visible_subcommands(c)
            .map(|s| {
                let n = s.get_name();
                (s, format!("{name}-{n}"), format!("{usage} {n}"))
            })
            .collect();
        todo.extend(subs.into_iter().rev());
    }
    let path = man.join(CONFIG_PAGE);
    let version = cmd.get_version().unwrap_or("");
    std::fs::write(&path, man5::render(version)).map_err(io(&path))?;
    written.push(path);
    for (shell, file) in completion_files(&bin) {
        let path = comp.join(file);
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cmd, bin.clone(), &mut out);
        std::fs::write(&path, out).map_err(io(&path))?;
        written.push(path);
    }
    Ok(written)
}

/// The subcommands that get a page: those not hidden.
fn visible_subcommands(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands().filter(|s| !s.is_hide_set())
}

/// `cmd` with clap's `help` subcommand turned off at every level (`--help` stays).
fn without_help(cmd: clap::Command) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    names
        .into_iter()
        .fold(cmd.disable_help_subcommand(true), |c, n| {
            c.mut_subcommand(n, without_help)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli() -> clap::Command {
        clap::Command::new("tool")
            .about("A tool")
            .subcommand(
                clap::Command::new("run")
                    .about("Run it")
                    .arg(clap::Arg::new("config").long("config")),
            )
            .subcommand(
                clap::Command::new("check")
                    .about("Check it")
                    .subcommand(clap::Command::new("deep").about("Check deeply")),
            )
            .subcommand(clap::Command::new("secret").hide(true))
    }

    #[test]
    fn one_page_per_visible_subcommand_at_every_level_and_three_completions() {
        let dir = tempfile::tempdir().unwrap();
        let files = generate(&cli(), dir.path()).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "man/tool.1",
                "man/tool-run.1",
                "man/tool-check.1",
                "man/tool-check-deep.1",
                "man/floodgate.toml.5",
                "completions/tool",
                "completions/_tool",
                "completions/tool.fish"
            ]
        );
        let run = std::fs::read_to_string(dir.path().join("man/tool-run.1")).unwrap();
        assert!(run.contains(".TH tool-run 1"), "{run}");
        assert!(run.contains("\\-\\-config"), "{run}");
        let check = std::fs::read_to_string(dir.path().join("man/tool-check.1")).unwrap();
        assert!(check.contains("tool\\-check\\-deep(1)"), "{check}");
        let bash = std::fs::read_to_string(dir.path().join("completions/tool")).unwrap();
        assert!(bash.contains("run") && bash.contains("check"));
    }

    #[test]
    fn an_unwritable_directory_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        std::fs::write(&file, "x").unwrap();
        let e = generate(&cli(), &file).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}/man: ", file.display())), "{e}");
    }
}
