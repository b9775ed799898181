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

/// Kafka's UNSUPPORTED_VERSION error code.
pub const UNSUPPORTED_VERSION: i16 = 35;

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
