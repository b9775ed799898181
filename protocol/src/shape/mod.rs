//! Checks a request body's array counts against the bytes that carry them
//! before the `kafka-protocol` decoders see it.
//!
//! Why: those decoders reserve `Vec` capacity from each array's count
//! before reading a single element, so a 20-byte request claiming 2^31
//! entries asks the allocator for hundreds of gigabytes. [`check_request`]
//! walks the body by the request's shape (generated from the crate's own
//! decoders, `generated.rs`) exactly as the crate will decode it, and
//! refuses any count whose elements cannot fit in the bytes that remain
//! (each element takes at least its minimum encoded size). A body that
//! passes holds every element it claims, so the capacity the decoders
//! reserve is bounded by the frame's own size.
//!
//! The walk costs one pass over the body without allocating.

mod generated;

use kafka_protocol::messages::ApiKey;

/// How one field is encoded.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A fixed-size scalar of this many bytes (bool, ints, float, uuid).
    Fixed(usize),
    /// Nullable or not: an i16 length (-1 null), then the bytes.
    Str,
    /// An unsigned varint length + 1 (0 null), then the bytes.
    CompactStr,
    /// An i32 length (-1 null), then the bytes.
    Bytes,
    /// An unsigned varint length + 1 (0 null), then the bytes.
    CompactBytes,
    /// An i32 count (-1 null), then the elements.
    Array(&'static Struct),
    CompactArray(&'static Struct),
    /// An array of fixed-size scalars of this many bytes.
    ArrayOf(usize),
    CompactArrayOf(usize),
    ArrayOfStr,
    CompactArrayOfStr,
    /// A nested struct, always present.
    Struct(&'static Struct),
    /// An i8 presence marker (1: present), then the struct.
    OptionStruct(&'static Struct),
}

/// A field present in versions `since..=until`.
#[derive(Debug)]
pub struct Field {
    pub kind: Kind,
    pub since: i16,
    pub until: i16,
}

/// A tagged field the crate decodes itself (rather than skipping its
/// declared size), valid from version `since`.
#[derive(Debug)]
pub struct Tagged {
    pub tag: u32,
    pub kind: Kind,
    pub since: i16,
}

/// One message struct: its fields in wire order and, from
/// `flexible_since`, a tagged-fields section at its end.
#[derive(Debug)]
pub struct Struct {
    pub versions: (i16, i16),
    pub flexible_since: i16,
    pub fields: &'static [Field],
    pub tags: &'static [Tagged],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("no request shape for api key {api_key}")]
    UnknownApi { api_key: i16 },
    #[error("version {version} is outside {min}..={max}")]
    Version { version: i16, min: i16, max: i16 },
    #[error("array of {count} elements of at least {element_bytes_min} bytes at byte {position} exceeds the {remaining} bytes left")]
    Count {
        count: u64,
        element_bytes_min: usize,
        remaining: usize,
        position: usize,
    },
    #[error("negative length {length} at byte {position}")]
    Negative { length: i64, position: usize },
    #[error("body ends at byte {position}, {needed} more bytes needed")]
    Truncated { position: usize, needed: usize },
    #[error("tag {tag} is not valid in version {version}")]
    Tag { tag: u32, version: i16 },
}

/// Whether a shape exists for this api key.
pub fn known(api_key: ApiKey) -> bool {
    generated::request(api_key as i16).is_some()
}

/// Walks `body` (the bytes after the request header) as the request of
/// `api_key` at `version`; `Ok` means every array count in it is backed by
/// bytes. Trailing bytes after the body are ignored, as the decoders do.
pub fn check_request(api_key: ApiKey, version: i16, body: &[u8]) -> Result<(), ShapeError> {
    let root = generated::request(api_key as i16).ok_or(ShapeError::UnknownApi {
        api_key: api_key as i16,
    })?;
    check_struct(root, version, body).map(|_| ())
}

/// Walks `body` as the message `shape` at `version`, as [`check_request`]
/// does for a request: for messages the broker carries inside others (the
/// consumer protocol in JoinGroup metadata). Returns how many bytes of
/// `body` the message takes.
pub fn check_struct(shape: &Struct, version: i16, body: &[u8]) -> Result<usize, ShapeError> {
    let (min, max) = shape.versions;
    if version < min || version > max {
        return Err(ShapeError::Version { version, min, max });
    }
    let mut walker = Walker {
        body,
        position: 0,
        version,
    };
    walker.structure(shape)?;
    Ok(walker.position)
}

struct Walker<'a> {
    body: &'a [u8],
    position: usize,
    version: i16,
}

impl Walker<'_> {
    fn remaining(&self) -> usize {
        self.body.len() - self.position
    }

    fn skip(&mut self, bytes: usize) -> Result<(), ShapeError> {
        if bytes > self.remaining() {
            return Err(ShapeError::Truncated {
                position: self.position,
                needed: bytes - self.remaining(),
            });
        }
        self.position += bytes;
        Ok(())
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], ShapeError> {
        let start = self.position;
        self.skip(N)?;
        Ok(self.body[start..start + N].try_into().expect("N bytes"))
    }

    /// The crate's unsigned varint: at most 5 bytes, high bits dropped.
    fn unsigned_varint(&mut self) -> Result<u32, ShapeError> {
        let mut value = 0u32;
        for i in 0..5 {
            let [byte] = self.take::<1>()?;
            value |= u32::from(byte & 0x7f).wrapping_shl(i * 7);
            if byte < 0x80 {
                break;
            }
        }
        Ok(value)
    }

    /// A length or count: `None` for null.
    fn length(&mut self, kind: LengthKind) -> Result<Option<u64>, ShapeError> {
        let position = self.position;
        let length: i64 = match kind {
            LengthKind::I16 => i16::from_be_bytes(self.take()?).into(),
            LengthKind::I32 => i32::from_be_bytes(self.take()?).into(),
            LengthKind::Compact => i64::from(self.unsigned_varint()?) - 1,
        };
        match length {
            -1 => Ok(None),
            n if n < -1 => Err(ShapeError::Negative {
                length: n,
                position,
            }),
            n => Ok(Some(n as u64)),
        }
    }

    fn count(&mut self, kind: LengthKind, element_bytes_min: usize) -> Result<u64, ShapeError> {
        let position = self.position;
        let count = self.length(kind)?.unwrap_or(0);
        let element_bytes_min = element_bytes_min.max(1);
        if count.saturating_mul(element_bytes_min as u64) > self.remaining() as u64 {
            return Err(ShapeError::Count {
                count,
                element_bytes_min,
                remaining: self.remaining(),
                position,
            });
        }
        Ok(count)
    }

    fn flexible(&self, shape: &Struct) -> bool {
        self.version >= shape.flexible_since
    }

    fn structure(&mut self, shape: &Struct) -> Result<(), ShapeError> {
        for field in shape.fields {
            if field.since <= self.version && self.version <= field.until {
                self.kind(field.kind)?;
            }
        }
        if self.flexible(shape) {
            self.tagged_fields(shape)?;
        }
        Ok(())
    }

    fn tagged_fields(&mut self, shape: &Struct) -> Result<(), ShapeError> {
        let count = self.unsigned_varint()?;
        // Each tagged field takes at least two bytes (tag, size).
        if u64::from(count) * 2 > self.remaining() as u64 {
            return Err(ShapeError::Count {
                count: count.into(),
                element_bytes_min: 2,
                remaining: self.remaining(),
                position: self.position,
            });
        }
        for _ in 0..count {
            let tag = self.unsigned_varint()?;
            let size = self.unsigned_varint()?;
            match shape.tags.iter().find(|t| t.tag == tag) {
                // The crate decodes known tags from the stream, whatever
                // size they declare; so does the walk.
                Some(known) if self.version >= known.since => self.kind(known.kind)?,
                Some(_) => {
                    return Err(ShapeError::Tag {
                        tag,
                        version: self.version,
                    })
                }
                None => self.skip(size as usize)?,
            }
        }
        Ok(())
    }

    fn kind(&mut self, kind: Kind) -> Result<(), ShapeError> {
        match kind {
            Kind::Fixed(bytes) => self.skip(bytes),
            Kind::Str => self.sized(LengthKind::I16),
            Kind::CompactStr | Kind::CompactBytes => self.sized(LengthKind::Compact),
            Kind::Bytes => self.sized(LengthKind::I32),
            Kind::Array(shape) => self.structs(LengthKind::I32, shape),
            Kind::CompactArray(shape) => self.structs(LengthKind::Compact, shape),
            Kind::ArrayOf(bytes) => {
                let count = self.count(LengthKind::I32, bytes)?;
                self.skip(count as usize * bytes)
            }
            Kind::CompactArrayOf(bytes) => {
                let count = self.count(LengthKind::Compact, bytes)?;
                self.skip(count as usize * bytes)
            }
            Kind::ArrayOfStr => {
                for _ in 0..self.count(LengthKind::I32, 2)? {
                    self.sized(LengthKind::I16)?;
                }
                Ok(())
            }
            Kind::CompactArrayOfStr => {
                for _ in 0..self.count(LengthKind::Compact, 1)? {
                    self.sized(LengthKind::Compact)?;
                }
                Ok(())
            }
            Kind::Struct(shape) => self.structure(shape),
            Kind::OptionStruct(shape) => {
                let [present] = self.take::<1>()?;
                if present == 1 {
                    self.structure(shape)?;
                }
                Ok(())
            }
        }
    }

    fn sized(&mut self, kind: LengthKind) -> Result<(), ShapeError> {
        match self.length(kind)? {
            Some(bytes) => self.skip(usize::try_from(bytes).unwrap_or(usize::MAX)),
            None => Ok(()),
        }
    }

    fn structs(&mut self, kind: LengthKind, shape: &Struct) -> Result<(), ShapeError> {
        let element_bytes_min = self.bytes_min(shape);
        for _ in 0..self.count(kind, element_bytes_min)? {
            self.structure(shape)?;
        }
        Ok(())
    }

    /// The fewest bytes one `shape` can take at this version.
    fn bytes_min(&self, shape: &Struct) -> usize {
        let flexible = self.flexible(shape);
        let mut total = usize::from(flexible); // empty tagged-fields count
        for field in shape.fields {
            if field.since > self.version || self.version > field.until {
                continue;
            }
            total += match field.kind {
                Kind::Fixed(bytes) => bytes,
                Kind::Str => 2,
                Kind::Bytes | Kind::Array(_) | Kind::ArrayOf(_) | Kind::ArrayOfStr => 4,
                Kind::CompactStr
                | Kind::CompactBytes
                | Kind::CompactArray(_)
                | Kind::CompactArrayOf(_)
                | Kind::CompactArrayOfStr
                | Kind::OptionStruct(_) => 1,
                Kind::Struct(inner) => self.bytes_min(inner),
            };
        }
        total
    }
}

#[derive(Clone, Copy)]
enum LengthKind {
    I16,
    I32,
    Compact,
}

#[cfg(test)]
mod tests;
