//! Reading Kafka's encodings of the `__consumer_offsets` records: fixed
//! width integers and strings (keys, older values) and the flexible
//! versions' varints, compact strings and arrays and tagged fields.

/// A cursor over a record's bytes; every read is `None` past the end.
pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
}

impl Reader<'_> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }
    pub(crate) fn i8(&mut self) -> Option<i8> {
        Some(self.take(1)?[0] as i8)
    }
    pub(crate) fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    pub(crate) fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    pub(crate) fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    pub(crate) fn u128(&mut self) -> Option<u128> {
        Some(u128::from_be_bytes(self.take(16)?.try_into().ok()?))
    }
    /// A fixed-width string; a null one (length -1) reads as empty.
    pub(crate) fn string(&mut self) -> Option<String> {
        let len = self.i16()?;
        if len < 0 {
            return Some(String::new());
        }
        String::from_utf8(self.take(len as usize)?.to_vec()).ok()
    }
    /// A fixed-width string that may not be null (a key's).
    pub(crate) fn key_string(&mut self) -> Option<String> {
        let len = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }
    pub(crate) fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    pub(crate) fn unsigned_varint(&mut self) -> Option<u32> {
        u32::try_from(self.varint()?).ok()
    }
    /// A compact length; `None` inside for null.
    pub(crate) fn compact_len(&mut self) -> Option<Option<usize>> {
        let n = self.varint()?;
        let len = n.checked_sub(1).map(|n| n as usize);
        // Each element or byte takes at least a byte.
        if len.is_some_and(|len| len > self.bytes.len()) {
            return None;
        }
        Some(len)
    }
    pub(crate) fn compact_string(&mut self) -> Option<Option<String>> {
        match self.compact_len()? {
            None => Some(None),
            Some(len) => Some(Some(String::from_utf8(self.take(len)?.to_vec()).ok()?)),
        }
    }
    /// Skips a struct's tagged fields.
    pub(crate) fn tags(&mut self) -> Option<()> {
        let count = self.varint()?;
        for _ in 0..count {
            self.varint()?;
            let size = usize::try_from(self.varint()?).ok()?;
            self.take(size)?;
        }
        Some(())
    }
}
