//! How listings are printed: text for people (`--format text`, the layout
//! of Kafka's tools) or one JSON document for scripts (`--format json`).

use anyhow::Context;
use clap::ValueEnum;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// How a listing is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Lines of text for people (the layout of Kafka's tools).
    #[default]
    Text,
    /// One JSON document (pretty-printed), for scripts and `jq`.
    Json,
}

/// Prints `{"KEY": value}`, the fields of `value`'s structs in the order
/// they are declared.
pub fn print_json_object(key: &'static str, value: &impl Serialize) -> anyhow::Result<()> {
    /// A JSON object of one field.
    struct Object<'a, T>(&'static str, &'a T);

    impl<T: Serialize> Serialize for Object<'_, T> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(1))?;
            map.serialize_entry(self.0, self.1)?;
            map.end()
        }
    }

    print_json(&Object(key, value))
}

/// Prints `value` as one pretty-printed JSON document and a newline.
pub fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("cannot write JSON")?;
    outln!("{text}");
    Ok(())
}
