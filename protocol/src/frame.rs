//! Kafka's size-prefixed framing: every request and response is a 4-byte
//! big-endian length followed by that many bytes. The length is checked
//! against a limit before anything is allocated for the frame.

/// Bytes of the length prefix in front of every frame.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Smallest request a client can send: api key (2), api version (2),
/// correlation id (4) and a client id length (2).
pub const REQUEST_BYTES_MIN: usize = 10;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame length {length} is negative")]
    Negative { length: i32 },
    #[error("frame of {length} bytes is below the minimum request size of {minimum}")]
    TooSmall { length: usize, minimum: usize },
    #[error("frame of {length} bytes exceeds the limit of {limit} bytes")]
    TooLarge { length: usize, limit: usize },
}

/// Reads the length prefix of a request frame and checks it against
/// `frame_bytes_max` before the caller allocates a buffer for it.
pub fn request_frame_length(
    prefix: [u8; LENGTH_PREFIX_BYTES],
    frame_bytes_max: usize,
) -> Result<usize, FrameError> {
    let length = i32::from_be_bytes(prefix);
    if length < 0 {
        return Err(FrameError::Negative { length });
    }
    let length = length as usize;
    if length < REQUEST_BYTES_MIN {
        return Err(FrameError::TooSmall {
            length,
            minimum: REQUEST_BYTES_MIN,
        });
    }
    if length > frame_bytes_max {
        return Err(FrameError::TooLarge {
            length,
            limit: frame_bytes_max,
        });
    }
    Ok(length)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(length: i32, max: usize, expected: Result<usize, FrameError>) {
        assert_eq!(request_frame_length(length.to_be_bytes(), max), expected);
    }

    #[test]
    fn lengths_are_bounded_before_allocation() {
        check(10, 100, Ok(10));
        check(100, 100, Ok(100));
        check(
            101,
            100,
            Err(FrameError::TooLarge {
                length: 101,
                limit: 100,
            }),
        );
        check(-1, 100, Err(FrameError::Negative { length: -1 }));
        check(
            i32::MIN,
            100,
            Err(FrameError::Negative { length: i32::MIN }),
        );
        check(
            3,
            100,
            Err(FrameError::TooSmall {
                length: 3,
                minimum: 10,
            }),
        );
        check(
            i32::MAX,
            100 << 20,
            Err(FrameError::TooLarge {
                length: i32::MAX as usize,
                limit: 100 << 20,
            }),
        );
    }
}
