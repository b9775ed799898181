//! The per-log checkpoint file: where recovery starts, where the log starts,
//! and whether the last close was clean. Replaced atomically (write a
//! temporary file, sync, rename, sync the directory); a CRC-32 guards it.

use std::path::Path;

use crate::error::{IoContext, Result};
use crate::file;

pub const FILE_NAME: &str = "strom.checkpoint";
const MAGIC: &[u8; 4] = b"STCK";
const VERSION: u16 = 1;
const ENCODED_LEN: usize = 4 + 2 + 8 + 8 + 8 + 1 + 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// Every segment whose successor starts at or below this offset was
    /// synced and indexed when it was sealed; recovery scans from here.
    pub recovery_point: u64,
    /// The first offset readers may see (DeleteRecords, retention).
    pub log_start_offset: u64,
    /// The log end offset at a clean close; meaningful only when `clean`.
    pub next_offset: u64,
    /// True only between a clean close and the next open.
    pub clean: bool,
}

impl Checkpoint {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENCODED_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&self.recovery_point.to_be_bytes());
        out.extend_from_slice(&self.log_start_offset.to_be_bytes());
        out.extend_from_slice(&self.next_offset.to_be_bytes());
        out.push(u8::from(self.clean));
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Decodes a checkpoint; `None` for anything damaged or unknown, in
    /// which case the caller recovers everything.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != ENCODED_LEN || &bytes[..4] != MAGIC {
            return None;
        }
        let (body, crc) = bytes.split_at(ENCODED_LEN - 4);
        if crc32fast::hash(body).to_be_bytes() != crc {
            return None;
        }
        if u16::from_be_bytes(body[4..6].try_into().ok()?) != VERSION {
            return None;
        }
        let u64_at = |at: usize| u64::from_be_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        Some(Self {
            recovery_point: u64_at(6),
            log_start_offset: u64_at(14),
            next_offset: u64_at(22),
            clean: match body[30] {
                0 => false,
                1 => true,
                _ => return None,
            },
        })
    }

    pub async fn read(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(FILE_NAME);
        match file::read_whole(&path).await {
            Ok(Some(bytes)) => Ok(Self::decode(&bytes)),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(FILE_NAME);
        let tmp = dir.join(format!("{FILE_NAME}.tmp"));
        file::write_whole(&tmp, &self.encode()).await?;
        glommio::io::rename(&tmp, &path)
            .await
            .ctx("rename checkpoint", &path, 0)?;
        file::sync_dir(dir).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let checkpoint = Checkpoint {
            recovery_point: 42,
            log_start_offset: 7,
            next_offset: 99,
            clean: true,
        };
        let bytes = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&bytes), Some(checkpoint));
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x10;
            assert_eq!(Checkpoint::decode(&damaged), None, "flip at byte {i}");
        }
        assert_eq!(Checkpoint::decode(&bytes[..bytes.len() - 1]), None);
    }
}
