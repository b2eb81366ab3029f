//! `corral server --config FILE`: a TOML file whose keys are the server's flags (`listen`,
//! `data_dir`, `retention_secs`...). Read before the command line is parsed, each key becomes the
//! `CORRAL_*` variable of its flag unless the environment sets that variable already, so that a
//! flag wins over the environment, which wins over the file, which wins over the defaults.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::CommandFactory;

/// The flag and variable that name the file.
const FLAG: &str = "--config";
const VARIABLE: &str = "CORRAL_SERVER_CONFIG";

/// For `corral server`, reads the configuration file that `args` or the environment name, if any,
/// and sets the variables it stands for.
pub fn apply<C: CommandFactory>(args: &[OsString]) -> Result<()> {
    if args.get(1).is_none_or(|a| a != "server") {
        return Ok(());
    }
    let Some(path) = file_named(args) else {
        return Ok(());
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let command = C::command();
    let server = command
        .find_subcommand("server")
        .context("the server command")?;
    for (key, value) in settings(&text, server).with_context(|| path.display().to_string())? {
        if std::env::var_os(&key).is_none() {
            // Before any thread starts: nothing reads the environment concurrently.
            std::env::set_var(key, value);
        }
    }
    Ok(())
}

/// `--config FILE`, `--config=FILE`, or the variable.
fn file_named(args: &[OsString]) -> Option<PathBuf> {
    let mut rest = args.iter().skip(2);
    while let Some(arg) = rest.next() {
        if arg == FLAG {
            return rest.next().map(PathBuf::from);
        }
        if let Some(file) = arg.to_str().and_then(|a| a.strip_prefix("--config=")) {
            return Some(PathBuf::from(file));
        }
    }
    std::env::var_os(VARIABLE).map(PathBuf::from)
}

/// The (variable, value) pairs a file sets, checked against the server's flags.
fn settings(text: &str, server: &clap::Command) -> Result<Vec<(String, String)>> {
    let table: toml::Table = toml::from_str(text)?;
    let mut pairs = Vec::new();
    for (key, value) in table {
        let long = key.replace('_', "-");
        let Some(env) = server
            .get_arguments()
            .filter(|a| a.get_long() == Some(long.as_str()) && long != "config")
            .find_map(|a| a.get_env())
        else {
            let known: Vec<String> = server
                .get_arguments()
                .filter(|a| a.get_env().is_some() && a.get_long() != Some("config"))
                .filter_map(|a| a.get_long().map(|l| l.replace('-', "_")))
                .collect();
            bail!("unknown key {key:?}; the keys are {}", known.join(", "));
        };
        let value = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => bail!(
                "{key}: a string, number or boolean, not a {}",
                other.type_str()
            ),
        };
        pairs.push((env.to_string_lossy().into_owned(), value));
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> clap::Command {
        clap::Command::new("server")
            .arg(clap::Arg::new("listen").long("listen").env("CORRAL_LISTEN"))
            .arg(
                clap::Arg::new("retention_secs")
                    .long("retention-secs")
                    .env("CORRAL_RETENTION_SECS"),
            )
            .arg(clap::Arg::new("config").long("config").env(VARIABLE))
    }

    #[test]
    fn keys_are_flags_and_values_their_text() {
        let pairs = settings(
            "listen = \"0.0.0.0:8470\"\nretention_secs = 60\n",
            &server(),
        )
        .unwrap();
        assert_eq!(
            pairs,
            [
                ("CORRAL_LISTEN".to_string(), "0.0.0.0:8470".to_string()),
                ("CORRAL_RETENTION_SECS".to_string(), "60".to_string())
            ]
        );
    }

    #[test]
    fn unknown_keys_and_tables_are_refused_by_name() {
        let e = settings("lisen = \"x\"", &server())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"lisen\"") && e.contains("listen, retention_secs"),
            "{e}"
        );
        let e = settings("config = \"x\"", &server())
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"config\""), "{e}");
        let e = settings("listen = [1]", &server()).unwrap_err().to_string();
        assert!(e.contains("listen: a string, number or boolean"), "{e}");
        assert!(settings("listen = ", &server()).is_err());
    }

    /// deploy/server.toml, the documented example, sets only keys the server has.
    #[test]
    fn the_example_file_is_a_valid_configuration() {
        let command = <crate::Cli as CommandFactory>::command();
        let server = command.find_subcommand("server").unwrap();
        let example = include_str!("../../../deploy/server.toml");
        let pairs = settings(example, server).unwrap();
        assert!(pairs
            .iter()
            .any(|(k, v)| k == "CORRAL_LISTEN" && v == "0.0.0.0:8470"));
        // The keys shown commented out hold too, once uncommented.
        let uncommented: String = example
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest)
                    if rest
                        .split_once(" = ")
                        .is_some_and(|(k, _)| !k.contains(' ')) =>
                {
                    rest
                }
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let all = settings(&uncommented, server).unwrap();
        let flags = server
            .get_arguments()
            .filter(|a| a.get_env().is_some() && a.get_long() != Some("config"))
            .count();
        assert_eq!(all.len(), flags, "every flag is in the example: {all:?}");
    }

    #[test]
    fn the_file_is_named_by_flag_either_way() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            file_named(&args(&["corral", "server", "--config", "a.toml"])),
            Some(PathBuf::from("a.toml"))
        );
        assert_eq!(
            file_named(&args(&[
                "corral",
                "server",
                "--listen",
                "x",
                "--config=b.toml"
            ])),
            Some(PathBuf::from("b.toml"))
        );
    }
}
