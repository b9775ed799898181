//! How listings are printed: text for people (`--format text`, the layout
//! of Kafka's tools) or one JSON document for scripts (`--format json`).

use anyhow::Context;
use clap::ValueEnum;

/// How a listing is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Lines of text for people (the layout of Kafka's tools).
    #[default]
    Text,
    /// One JSON document (pretty-printed), for scripts and `jq`.
    Json,
}

/// Prints `value` as one pretty-printed JSON document and a newline.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("cannot write JSON")?;
    outln!("{text}");
    Ok(())
}
