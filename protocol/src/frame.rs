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

/// Whether the first bytes a client sent are a TLS record carrying a
/// handshake (a ClientHello): content type 22, protocol version 3.x
/// (SSL 3.0 to TLS 1.3, whose records say 3.1), a record length of at most
/// 2^14 + 2048. Read as a Kafka length prefix they announce a frame of
/// over 350 MB, so a client configured for SSL or SASL_SSL that reaches a
/// plaintext listener is told apart from a malformed request.
pub fn is_tls_handshake(prefix: [u8; LENGTH_PREFIX_BYTES]) -> bool {
    const CONTENT_TYPE_HANDSHAKE: u8 = 0x16;
    const VERSION_MAJOR: u8 = 0x03;
    const VERSION_MINOR_MAX: u8 = 0x04;
    // The high byte of a record length of at most 2^14 + 2048 bytes.
    const RECORD_LENGTH_HIGH_MAX: u8 = (((1u16 << 14) + 2048) >> 8) as u8;
    prefix[0] == CONTENT_TYPE_HANDSHAKE
        && prefix[1] == VERSION_MAJOR
        && prefix[2] <= VERSION_MINOR_MAX
        && prefix[3] <= RECORD_LENGTH_HIGH_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_client_hello_is_recognised_and_requests_are_not() {
        // TLS 1.2 and 1.3 ClientHellos (both records say 3.1), SSL 3.0's.
        assert!(is_tls_handshake([0x16, 0x03, 0x01, 0x02]));
        assert!(is_tls_handshake([0x16, 0x03, 0x01, 0x00]));
        assert!(is_tls_handshake([0x16, 0x03, 0x00, 0x48]));
        assert!(is_tls_handshake([0x16, 0x03, 0x03, 0x01]));
        // A record longer than TLS allows, another content type, another version.
        assert!(!is_tls_handshake([0x16, 0x03, 0x01, 0x49]));
        assert!(!is_tls_handshake([0x17, 0x03, 0x01, 0x00]));
        assert!(!is_tls_handshake([0x16, 0x02, 0x01, 0x00]));
        assert!(!is_tls_handshake([0x16, 0x03, 0x05, 0x00]));
        // Kafka requests: small lengths.
        assert!(!is_tls_handshake(100i32.to_be_bytes()));
        assert!(!is_tls_handshake((1i32 << 20).to_be_bytes()));
    }

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
