//! How `strom log dump` prints: one line per thing found (a batch, a
//! record, an index entry, a metadata record, a problem), as
//! `KIND name=value ...` text for people or, with `--json`, one JSON object
//! per line (`{"type": KIND, "name": value, ...}`, fields in the same
//! order) for scripts.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};

use serde_json::Value;

/// The bytes of a key, value or header key, for people: `"text"` when
/// they are UTF-8 without control characters (`"` and `\` escaped),
/// else `hex:` and two hex digits a byte; `null` when absent.
pub fn bytes_text(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "null".to_string(),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) if !text.chars().any(char::is_control) => quoted(text),
            _ => format!("hex:{}", hex(bytes)),
        },
    }
}

/// `text` in double quotes, with `"` and `\` escaped.
pub fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// One field: how it reads in text and in JSON (where a binary value
/// goes under another name, `NAME_hex`).
struct Field {
    name: &'static str,
    text: String,
    json_name: String,
    json: Value,
}

/// One printed line: its kind, its fields in order, and a free-text tail
/// (a problem's reason, a metadata record).
pub struct Line {
    kind: &'static str,
    indented: bool,
    fields: Vec<Field>,
    tail: Option<(&'static str, String)>,
}

impl Line {
    pub fn new(kind: &'static str) -> Self {
        Self {
            kind,
            indented: false,
            fields: Vec::new(),
            tail: None,
        }
    }

    /// A line that belongs to the line above it (a batch's records): two
    /// spaces in front in text; the same object in JSON.
    pub fn indented(kind: &'static str) -> Self {
        Self {
            indented: true,
            ..Self::new(kind)
        }
    }

    fn push(mut self, name: &'static str, text: String, json: Value) -> Self {
        self.fields.push(Field {
            name,
            text,
            json_name: name.to_string(),
            json,
        });
        self
    }

    /// A number.
    pub fn num<T>(self, name: &'static str, value: T) -> Self
    where
        T: Into<serde_json::Number> + std::fmt::Display + Copy,
    {
        self.push(name, value.to_string(), Value::Number(value.into()))
    }

    pub fn flag(self, name: &'static str, value: bool) -> Self {
        self.push(name, value.to_string(), Value::Bool(value))
    }

    /// A word of the tool's own (a codec, a type): unquoted in text.
    pub fn word(self, name: &'static str, value: impl Into<String>) -> Self {
        let value = value.into();
        self.push(name, value.clone(), Value::String(value))
    }

    /// Text from the file (a path, a topic name): quoted in text.
    pub fn text(self, name: &'static str, value: &str) -> Self {
        self.push(name, quoted(value), Value::String(value.to_string()))
    }

    /// A number that may be absent (`null`).
    pub fn maybe_num<T>(self, name: &'static str, value: Option<T>) -> Self
    where
        T: Into<serde_json::Number> + std::fmt::Display + Copy,
    {
        match value {
            Some(value) => self.num(name, value),
            None => self.push(name, "null".to_string(), Value::Null),
        }
    }

    /// Bytes from the file (a key, a value): see [`bytes_text`]; in JSON a
    /// UTF-8 string under `name`, else hex under `name_hex` (`name` null).
    pub fn data(mut self, name: &'static str, bytes: Option<&[u8]>) -> Self {
        let text = bytes_text(bytes);
        let (json_name, json) = match bytes {
            None => (name.to_string(), Value::Null),
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(utf8) => (name.to_string(), Value::String(utf8.to_string())),
                Err(_) => (format!("{name}_hex"), Value::String(hex(bytes))),
            },
        };
        self.fields.push(Field {
            name,
            text,
            json_name,
            json,
        });
        self
    }

    /// A list of numbers (replicas, voters): `[1,2,3]`.
    pub fn list<T>(self, name: &'static str, values: &[T]) -> Self
    where
        T: Into<serde_json::Number> + std::fmt::Display + Copy,
    {
        let text = format!(
            "[{}]",
            values
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        let json = Value::Array(values.iter().map(|&v| Value::Number(v.into())).collect());
        self.push(name, text, json)
    }

    /// A field with a text form and a JSON form of its own (headers,
    /// configs).
    pub fn custom(self, name: &'static str, text: String, json: Value) -> Self {
        self.push(name, text, json)
    }

    /// Free text after the fields: `: REASON` in text, `"reason"` in JSON.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.tail = Some(("reason", reason.into()));
        self
    }

    /// Free text after the fields, after a space in text (a decoded
    /// metadata record), under `name` in JSON.
    pub fn detail(mut self, name: &'static str, detail: impl Into<String>) -> Self {
        self.tail = Some((name, detail.into()));
        self
    }

    fn render_text(&self) -> String {
        let mut out = String::new();
        if self.indented {
            out.push_str("  ");
        }
        out.push_str(self.kind);
        for field in &self.fields {
            let _ = write!(out, " {}={}", field.name, field.text);
        }
        match &self.tail {
            Some(("reason", reason)) => {
                let _ = write!(out, ": {reason}");
            }
            Some((_, detail)) => {
                let _ = write!(out, " {detail}");
            }
            None => {}
        }
        out
    }

    fn render_json(&self) -> String {
        let mut out = String::from("{\"type\":");
        out.push_str(&Value::String(self.kind.to_string()).to_string());
        for field in &self.fields {
            let _ = write!(
                out,
                ",{}:{}",
                Value::String(field.json_name.clone()),
                field.json
            );
        }
        if let Some((name, text)) = &self.tail {
            let _ = write!(
                out,
                ",{}:{}",
                Value::String(name.to_string()),
                Value::String(text.clone())
            );
        }
        out.push('}');
        out
    }

    /// The line as it prints, text or JSON.
    pub fn render(&self, json: bool) -> String {
        if json {
            self.render_json()
        } else {
            self.render_text()
        }
    }
}

/// Where the lines go: stdout, buffered (a segment holds millions of
/// records), and how many problems were printed.
pub struct Printer {
    json: bool,
    out: BufWriter<Box<dyn Write>>,
    problems: usize,
}

impl Printer {
    pub fn new(json: bool) -> Self {
        Self {
            json,
            out: BufWriter::new(Box::new(std::io::stdout())),
            problems: 0,
        }
    }

    /// A printer whose lines go nowhere (tests count its problems).
    #[cfg(test)]
    pub fn sink() -> Self {
        Self {
            json: false,
            out: BufWriter::new(Box::new(std::io::sink())),
            problems: 0,
        }
    }

    /// Prints a line; a reader that went away ends the tool quietly.
    pub fn line(&mut self, line: Line) {
        let mut text = line.render(self.json);
        text.push('\n');
        if let Err(error) = self.out.write_all(text.as_bytes()) {
            crate::cli::exit_on_stdout_error(&error);
        }
    }

    /// Prints a problem line (`problem ...: REASON`) and counts it.
    pub fn problem(&mut self, line: Line) {
        self.problems += 1;
        self.line(line);
    }

    /// Problems printed so far.
    pub fn problems(&self) -> usize {
        self.problems
    }

    pub fn flush(&mut self) {
        if let Err(error) = self.out.flush() {
            crate::cli::exit_on_stdout_error(&error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: Line, text: &str, json: &str) {
        assert_eq!(line.render(false), text);
        assert_eq!(line.render(true), json);
        serde_json::from_str::<Value>(json).expect("valid JSON");
    }

    #[test]
    fn bytes_print_as_text_when_printable_else_as_hex() {
        assert_eq!(bytes_text(None), "null");
        assert_eq!(bytes_text(Some(b"")), "\"\"");
        assert_eq!(bytes_text(Some(b"key-1")), "\"key-1\"");
        assert_eq!(bytes_text(Some(b"a \"b\" \\")), r#""a \"b\" \\""#);
        assert_eq!(bytes_text(Some("grüße".as_bytes())), "\"grüße\"");
        assert_eq!(bytes_text(Some(b"tab\there")), "hex:7461620968657265");
        assert_eq!(bytes_text(Some(&[0x00, 0xff, 0x10])), "hex:00ff10");
    }

    #[test]
    fn lines_print_as_text_and_as_json_in_the_same_order() {
        check(
            Line::indented("record")
                .num("offset", 7i64)
                .data("key", Some(&[0xff, 0x00]))
                .data("value", None)
                .flag("tombstone", true)
                .list("isr", &[1i32, 2]),
            "  record offset=7 key=hex:ff00 value=null tombstone=true isr=[1,2]",
            r#"{"type":"record","offset":7,"key_hex":"ff00","value":null,"tombstone":true,"isr":[1,2]}"#,
        );
        check(
            Line::new("problem")
                .num("position", 61u64)
                .reason("record batch CRC mismatch"),
            "problem position=61: record batch CRC mismatch",
            r#"{"type":"problem","position":61,"reason":"record batch CRC mismatch"}"#,
        );
        check(
            Line::new("metadata_record")
                .word("record_type", "ClusterId")
                .text("path", "a \"b\"")
                .detail("record", "ClusterId(\"x\")"),
            r#"metadata_record record_type=ClusterId path="a \"b\"" ClusterId("x")"#,
            r#"{"type":"metadata_record","record_type":"ClusterId","path":"a \"b\"","record":"ClusterId(\"x\")"}"#,
        );
    }
}
