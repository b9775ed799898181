//! `strom-tune`: checks that a Linux host is fit to run Strom, applies the
//! settings it can, and calibrates the data disk into `io-properties.toml`.
//! Parsing is plain functions over the text of /proc and /sys files
//! (`parse`); where those files are read from is [`host::Host`], so every
//! rule runs on fixture trees in tests.

pub mod apply;
pub mod check;
pub mod host;
pub mod iotune;
pub mod parse;
pub mod probe;
