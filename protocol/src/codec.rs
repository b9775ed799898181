//! Request decoding and response encoding on top of the `kafka-protocol`
//! crate: the request header at the header version its api key and version
//! call for, the body at its version, and responses framed with their
//! 4-byte length and the right response header version.
//!
//! The caller bounds the frame size (see [`crate::frame`]) before handing a
//! frame here; [`decode_body`] checks every array count against the body's
//! bytes ([`crate::shape`]) before the decoders reserve memory for it.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    api_versions_response::ApiVersion, ApiKey, ApiVersionsResponse, RequestHeader, RequestKind,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::error_codes::UNSUPPORTED_VERSION;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("unknown api key {api_key}")]
    UnknownApiKey { api_key: i16 },
    #[error("malformed request header for api key {api_key} v{api_version}: {message}")]
    Header {
        api_key: i16,
        api_version: i16,
        message: String,
    },
    #[error("malformed {api_key:?} v{api_version} request body: {message}")]
    Body {
        api_key: ApiKey,
        api_version: i16,
        message: String,
    },
    #[error("refused {api_key:?} v{api_version} request body: {error}")]
    Shape {
        api_key: ApiKey,
        api_version: i16,
        error: crate::shape::ShapeError,
    },
    #[error("cannot encode {what} v{api_version}: {message}")]
    Encode {
        what: &'static str,
        api_version: i16,
        message: String,
    },
}

/// A request frame whose header is decoded and whose body is still bytes.
#[derive(Debug, Clone)]
pub struct RequestFrame {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<StrBytes>,
    pub body: Bytes,
}

/// Decodes the request header of `frame` (the bytes after the length
/// prefix) at the header version for its api key and version.
pub fn decode_header(mut frame: Bytes) -> Result<RequestFrame, CodecError> {
    if frame.len() < 4 {
        return Err(CodecError::Header {
            api_key: -1,
            api_version: -1,
            message: format!("{} bytes is too short for a header", frame.len()),
        });
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let api_key =
        ApiKey::try_from(raw_key).map_err(|()| CodecError::UnknownApiKey { api_key: raw_key })?;
    let header_version = api_key.request_header_version(api_version);
    let header =
        RequestHeader::decode(&mut frame, header_version).map_err(|e| CodecError::Header {
            api_key: raw_key,
            api_version,
            message: e.to_string(),
        })?;
    Ok(RequestFrame {
        api_key,
        api_version,
        correlation_id: header.correlation_id,
        client_id: header.client_id,
        body: frame,
    })
}

/// Decodes the body of a request whose version the caller has checked,
/// after checking its shape: an array count its bytes cannot hold is
/// refused before anything is allocated for it.
pub fn decode_body(frame: &RequestFrame) -> Result<RequestKind, CodecError> {
    crate::shape::check_request(frame.api_key, frame.api_version, &frame.body).map_err(
        |error| CodecError::Shape {
            api_key: frame.api_key,
            api_version: frame.api_version,
            error,
        },
    )?;
    let mut body = frame.body.clone();
    RequestKind::decode(frame.api_key, &mut body, frame.api_version).map_err(|e| CodecError::Body {
        api_key: frame.api_key,
        api_version: frame.api_version,
        message: e.to_string(),
    })
}

/// An encoded response frame as the byte runs to send in order. Byte
/// fields handed to [`encode_response_sharing`] (fetched record batches)
/// are their own runs, sharing the caller's buffers instead of being copied
/// into the frame.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoded {
    parts: Vec<Bytes>,
}

impl Encoded {
    /// Bytes of the whole frame, length prefix included.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The runs of the frame, in order.
    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The frame in one buffer (a copy when it has several runs).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut out = BytesMut::with_capacity(self.len());
                for part in many {
                    out.extend_from_slice(part);
                }
                out.freeze()
            }
        }
    }
}

impl From<Bytes> for Encoded {
    fn from(bytes: Bytes) -> Self {
        Encoded { parts: vec![bytes] }
    }
}

/// Byte fields at least this long are shared rather than copied; shorter
/// ones cost less to copy than a separate write.
const SHARE_BYTES_MIN: usize = 16 << 10;

/// The encoder's buffer: copies what it is given, except slices that lie
/// inside one of `shared`, which become runs of their own (a `Bytes` view
/// of the same memory, found with `Bytes::slice_ref`).
struct Gather<'a> {
    shared: &'a [Bytes],
    /// Where `owner_of` starts looking.
    next_shared: usize,
    done: Vec<Bytes>,
    done_len: usize,
    current: BytesMut,
}

impl Gather<'_> {
    /// The shared buffer holding `src`. Byte fields are encoded in the
    /// order `shared` lists them, so the search starts after the last find
    /// (one comparison per field for a fetch of many partitions).
    fn owner_of(&mut self, src: &[u8]) -> Option<Bytes> {
        let start = src.as_ptr() as usize;
        let end = start + src.len();
        let holds = |b: &Bytes| {
            let b_start = b.as_ptr() as usize;
            b_start <= start && end <= b_start + b.len()
        };
        let count = self.shared.len();
        let found = (0..count)
            .map(|i| (self.next_shared + i) % count)
            .find(|&i| holds(&self.shared[i]))?;
        self.next_shared = found + 1;
        Some(self.shared[found].slice_ref(src))
    }
}

// SAFETY: every method forwards to the `BytesMut` being filled, which
// upholds `BufMut`'s contract; `put_slice` only adds whole runs in front of
// it, which never exposes uninitialised memory.
unsafe impl BufMut for Gather<'_> {
    fn remaining_mut(&self) -> usize {
        self.current.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.current.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut bytes::buf::UninitSlice {
        self.current.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if src.len() >= SHARE_BYTES_MIN {
            if let Some(run) = self.owner_of(src) {
                let head = self.current.split().freeze();
                self.done_len += head.len() + run.len();
                if !head.is_empty() {
                    self.done.push(head);
                }
                self.done.push(run);
                return;
            }
        }
        self.current.extend_from_slice(src);
    }
}

impl kafka_protocol::protocol::buf::ByteBufMut for Gather<'_> {
    fn offset(&self) -> usize {
        self.done_len + self.current.len()
    }

    fn seek(&mut self, offset: usize) {
        let local = offset
            .checked_sub(self.done_len)
            .expect("encoders do not seek back over a shared run");
        self.current.resize(local, 0);
    }

    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        let start = r
            .start
            .checked_sub(self.done_len)
            .expect("encoders do not revisit a shared run");
        &mut self.current[start..r.end - self.done_len]
    }
}

/// Encodes a response like [`encode_response`], except that byte fields
/// which are slices of `shared` (at least 16 KiB) are not copied: they
/// become runs of the result that share those buffers.
pub fn encode_response_sharing<T: Encodable + HeaderVersion>(
    correlation_id: i32,
    api_version: i16,
    body: &T,
    shared: &[Bytes],
) -> Result<Encoded, CodecError> {
    let encode_error = |e: anyhow::Error| CodecError::Encode {
        what: "response body",
        api_version,
        message: e.to_string(),
    };
    let size = body.compute_size(api_version).map_err(encode_error)?;
    let flexible = T::header_version(api_version) >= 1;
    gather_frame(
        "response body",
        api_version,
        size + 4 + usize::from(flexible),
        shared,
        |out| {
            out.put_i32(correlation_id);
            if flexible {
                // No tagged fields in the response header.
                out.put_u8(0);
            }
            body.encode(out, api_version).map_err(encode_error)
        },
    )
}

/// Encodes a request with its length prefix and `header`, byte fields
/// that are slices of `shared` (at least 16 KiB: a produce request's
/// record batches) shared rather than copied, as
/// [`encode_response_sharing`] does for answers.
pub fn encode_request_sharing<T: Encodable + HeaderVersion>(
    header: &RequestHeader,
    api_version: i16,
    body: &T,
    shared: &[Bytes],
) -> Result<Encoded, CodecError> {
    let encode_error = |e: anyhow::Error| CodecError::Encode {
        what: "request",
        api_version,
        message: e.to_string(),
    };
    let header_version = T::header_version(api_version);
    let size = header
        .compute_size(header_version)
        .and_then(|h| Ok(h + body.compute_size(api_version)?))
        .map_err(encode_error)?;
    gather_frame("request", api_version, size, shared, |out| {
        header.encode(out, header_version).map_err(encode_error)?;
        body.encode(out, api_version).map_err(encode_error)
    })
}

/// A frame of `size` bytes after its length prefix, written by `write`
/// into a [`Gather`] over `shared`; checks that `write` wrote `size`.
fn gather_frame(
    what: &'static str,
    api_version: i16,
    size: usize,
    shared: &[Bytes],
    write: impl FnOnce(&mut Gather<'_>) -> Result<(), CodecError>,
) -> Result<Encoded, CodecError> {
    let length = i32::try_from(size).map_err(|_| CodecError::Encode {
        what,
        api_version,
        message: format!("{size} bytes do not fit a frame"),
    })?;
    // Only the runs that will be shared stay out of the copied buffer.
    let shared_len: usize = shared
        .iter()
        .map(Bytes::len)
        .filter(|len| *len >= SHARE_BYTES_MIN)
        .sum();
    let mut out = Gather {
        shared,
        next_shared: 0,
        done: Vec::new(),
        done_len: 0,
        current: BytesMut::with_capacity((4 + size).saturating_sub(shared_len).max(64)),
    };
    out.put_i32(length);
    write(&mut out)?;
    let mut parts = out.done;
    if !out.current.is_empty() {
        parts.push(out.current.freeze());
    }
    let encoded = Encoded { parts };
    if encoded.len() != size + 4 {
        return Err(CodecError::Encode {
            what,
            api_version,
            message: format!("encoded {} bytes, computed {}", encoded.len(), size + 4),
        });
    }
    Ok(encoded)
}

/// Encodes a response with its length prefix and response header.
pub fn encode_response<T: Encodable + HeaderVersion>(
    correlation_id: i32,
    api_version: i16,
    body: &T,
) -> Result<Bytes, CodecError> {
    let encode_error = |what: &'static str| {
        move |e: anyhow::Error| CodecError::Encode {
            what,
            api_version,
            message: e.to_string(),
        }
    };
    let size = body
        .compute_size(api_version)
        .map_err(encode_error("response body"))?;
    let header_version = T::header_version(api_version);
    let mut out = BytesMut::with_capacity(4 + 5 + size);
    out.put_i32(0);
    out.put_i32(correlation_id);
    if header_version >= 1 {
        // No tagged fields in the response header.
        out.put_u8(0);
    }
    body.encode(&mut out, api_version)
        .map_err(encode_error("response body"))?;
    let length = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&length.to_be_bytes());
    Ok(out.freeze())
}

/// The answer Kafka gives to an ApiVersions request at a version it does
/// not support: a v0 body with UNSUPPORTED_VERSION and the supported ranges,
/// behind a v0 response header. The request body is not parsed.
pub fn api_versions_unsupported(correlation_id: i32, supported: Vec<ApiVersion>) -> Bytes {
    let body = ApiVersionsResponse::default()
        .with_error_code(UNSUPPORTED_VERSION)
        .with_api_keys(supported);
    encode_response(correlation_id, 0, &body).expect("a v0 ApiVersions response always encodes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
    use kafka_protocol::protocol::Encodable;

    fn request_bytes<T: Encodable>(api_key: ApiKey, version: i16, body: &T) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(77)
            .with_client_id(Some(StrBytes::from_static_str("test")));
        let mut out = BytesMut::new();
        header
            .encode(&mut out, api_key.request_header_version(version))
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out.freeze()
    }

    #[test]
    fn sharing_encoder_writes_the_same_frame_without_copying_large_records() {
        use kafka_protocol::messages::fetch_response::{
            FetchResponse, FetchableTopicResponse, PartitionData,
        };
        use kafka_protocol::messages::TopicName;
        let big = Bytes::from((0..100_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>());
        let small = Bytes::from_static(b"a small record set");
        let partitions = vec![
            PartitionData::default()
                .with_partition_index(0)
                .with_high_watermark(9)
                .with_records(Some(big.slice(10..90_010))),
            PartitionData::default()
                .with_partition_index(1)
                .with_records(Some(small.clone())),
            PartitionData::default()
                .with_partition_index(2)
                .with_records(Some(big.clone())),
        ];
        let body = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(partitions)]);
        let shared = [big.slice(10..90_010), small.clone(), big.clone()];
        for version in [4, 11, 12] {
            let copied = encode_response(5, version, &body).unwrap();
            let sharing = encode_response_sharing(5, version, &body, &shared).unwrap();
            assert_eq!(sharing.to_bytes(), copied, "v{version}");
            assert_eq!(sharing.len(), copied.len());
            // The two large record sets are runs of their own, pointing
            // into `big`; the small one was copied.
            let big_runs: Vec<&Bytes> = sharing
                .parts()
                .iter()
                .filter(|p| p.len() >= 90_000)
                .collect();
            assert_eq!(big_runs.len(), 2, "v{version}");
            assert_eq!(big_runs[0].as_ptr(), big[10..].as_ptr());
            assert_eq!(big_runs[1].as_ptr(), big.as_ptr());
            assert!(sharing.parts().iter().all(|p| p.as_ptr() != small.as_ptr()));
        }
    }

    /// A forwarded produce: the frame is the one a plain encoder writes,
    /// and a large batch goes out of the buffer it came in.
    #[test]
    fn a_request_shares_its_large_batches() {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::{ProduceRequest, TopicName};
        let big = Bytes::from((0..40_000u32).map(|i| (i % 13) as u8).collect::<Vec<_>>());
        let small = Bytes::from_static(b"small batch");
        let body = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(big.clone())),
                    PartitionProduceData::default()
                        .with_index(1)
                        .with_records(Some(small.clone())),
                ])]);
        for version in [3, 9, 11] {
            let header = RequestHeader::default()
                .with_request_api_key(ApiKey::Produce as i16)
                .with_request_api_version(version)
                .with_correlation_id(77)
                .with_client_id(Some(StrBytes::from_static_str("test")));
            let plain = request_bytes(ApiKey::Produce, version, &body);
            let sharing =
                encode_request_sharing(&header, version, &body, &[big.clone(), small.clone()])
                    .unwrap();
            let frame = sharing.to_bytes();
            assert_eq!(&frame[4..], &plain[..], "v{version}");
            assert_eq!(&frame[..4], &(plain.len() as i32).to_be_bytes());
            let runs: Vec<&Bytes> = sharing
                .parts()
                .iter()
                .filter(|p| p.len() >= 40_000)
                .collect();
            assert_eq!(runs.len(), 1, "v{version}");
            assert_eq!(runs[0].as_ptr(), big.as_ptr(), "the batch is not copied");
            let decoded = decode_header(frame.slice(4..)).unwrap();
            assert!(matches!(
                decode_body(&decoded).unwrap(),
                RequestKind::Produce(_)
            ));
        }
    }

    #[test]
    fn header_and_body_round_trip_flexible_and_not() {
        for version in [0, 3] {
            let frame = request_bytes(ApiKey::ApiVersions, version, &ApiVersionsRequest::default());
            let decoded = decode_header(frame).unwrap();
            assert_eq!(decoded.api_key, ApiKey::ApiVersions);
            assert_eq!(decoded.correlation_id, 77);
            assert_eq!(decoded.client_id.as_deref(), Some("test"));
            assert!(matches!(
                decode_body(&decoded).unwrap(),
                RequestKind::ApiVersions(_)
            ));
        }
        let frame = request_bytes(ApiKey::Metadata, 12, &MetadataRequest::default());
        assert!(matches!(
            decode_body(&decode_header(frame).unwrap()).unwrap(),
            RequestKind::Metadata(_)
        ));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(
            decode_header(Bytes::from_static(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0])),
            Err(CodecError::UnknownApiKey { .. })
        ));
        assert!(decode_header(Bytes::from_static(&[0, 3, 0])).is_err());
        // Metadata v9 header claims a client id longer than the frame.
        assert!(decode_header(Bytes::from_static(&[0, 3, 0, 9, 0, 0, 0, 1, 0x7f, 0x00])).is_err());
    }

    #[test]
    fn array_counts_beyond_the_body_are_refused_before_decoding() {
        let mut frame = request_bytes(
            ApiKey::Metadata,
            1,
            &MetadataRequest::default().with_topics(Some(vec![])),
        )
        .to_vec();
        let len = frame.len();
        frame[len - 4..].copy_from_slice(&(1i32 << 30).to_be_bytes());
        let request = decode_header(Bytes::from(frame)).unwrap();
        assert!(matches!(
            decode_body(&request),
            Err(CodecError::Shape {
                error: crate::shape::ShapeError::Count { .. },
                ..
            })
        ));
    }

    #[test]
    fn unsupported_api_versions_answer_is_v0_shaped() {
        let supported = vec![ApiVersion::default()
            .with_api_key(18)
            .with_min_version(0)
            .with_max_version(3)];
        let bytes = api_versions_unsupported(5, supported);
        // length, correlation id, error code, array of one (key, min, max)
        let expected: Vec<u8> = [
            &16i32.to_be_bytes()[..],
            &5i32.to_be_bytes(),
            &35i16.to_be_bytes(),
            &1i32.to_be_bytes(),
            &18i16.to_be_bytes(),
            &0i16.to_be_bytes(),
            &3i16.to_be_bytes(),
        ]
        .concat();
        assert_eq!(&bytes[..], &expected[..]);
    }
}
