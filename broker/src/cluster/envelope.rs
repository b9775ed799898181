//! Kafka's Envelope (API 58) between brokers: a request a broker forwards
//! for a client (an admin request for the active controller, a group
//! request for its coordinator) travels wrapped with the client's
//! principal and address, so the broker that serves it authorizes the
//! client, not the forwarding broker. The forwarding broker itself must be
//! allowed CLUSTER_ACTION on the cluster (brokers are super users).
//!
//! Only used while the authorizer is on; without it nothing is authorized
//! and requests are forwarded as they came.

use std::net::IpAddr;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, EnvelopeRequest, EnvelopeResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use crate::authorizer::Session;

/// The Envelope version Strom sends and serves.
pub const VERSION: i16 = 0;
/// Envelope's response header version (flexible).
const RESPONSE_HEADER_VERSION: i16 = 1;

/// `frame` (a whole request without its length prefix) wrapped for
/// `session`'s principal at `peer`: an Envelope request frame, without its
/// length prefix.
pub fn wrap(frame: &[u8], session: &Session, peer: Option<IpAddr>, node_id: i32) -> Option<Bytes> {
    let address = match peer {
        Some(IpAddr::V4(ip)) => Bytes::copy_from_slice(&ip.octets()),
        Some(IpAddr::V6(ip)) => Bytes::copy_from_slice(&ip.octets()),
        None => Bytes::new(),
    };
    let request = EnvelopeRequest::default()
        .with_request_data(Bytes::copy_from_slice(frame))
        .with_request_principal(Some(Bytes::from(session.principal.clone())))
        .with_client_host_address(address);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Envelope as i16)
        .with_request_api_version(VERSION)
        .with_correlation_id(0)
        .with_client_id(Some(StrBytes::from_string(format!(
            "{}{node_id}",
            super::transport::FORWARDED_CLIENT_ID_PREFIX
        ))));
    let encoded = protocol::codec::encode_request_sharing(&header, VERSION, &request, &[]).ok()?;
    Some(encoded.to_bytes().slice(4..))
}

/// The client's answer inside an Envelope `answer` (a response frame with
/// its length prefix), with its own length prefix; or why there is none.
pub fn unwrap(answer: &Bytes) -> Result<Bytes, String> {
    let mut body = answer.slice(4.min(answer.len())..);
    ResponseHeader::decode(&mut body, RESPONSE_HEADER_VERSION)
        .map_err(|e| format!("an Envelope answer's header does not decode: {e}"))?;
    let response = EnvelopeResponse::decode(&mut body, VERSION)
        .map_err(|e| format!("an Envelope answer does not decode: {e}"))?;
    if response.error_code != 0 {
        return Err(format!(
            "the broker refused the Envelope: {}",
            protocol::client::error_name(response.error_code)
        ));
    }
    let inner = response
        .response_data
        .ok_or("an Envelope answer without the client's answer")?;
    let mut framed = BytesMut::with_capacity(4 + inner.len());
    framed.extend_from_slice(&(inner.len() as u32).to_be_bytes());
    framed.extend_from_slice(&inner);
    Ok(framed.freeze())
}

/// What an Envelope request carries: the client's request frame, its
/// principal and its address.
pub struct Opened {
    pub frame: Bytes,
    pub principal: String,
    pub peer: Option<IpAddr>,
}

/// Reads an Envelope request's body; why it cannot be served, else.
pub fn open(mut body: Bytes, version: i16) -> Result<Opened, String> {
    if version != VERSION {
        return Err(format!("Envelope version {version} (served: {VERSION})"));
    }
    let request = EnvelopeRequest::decode(&mut body, version)
        .map_err(|e| format!("an Envelope request does not decode: {e}"))?;
    let principal = request
        .request_principal
        .as_deref()
        .map(std::str::from_utf8)
        .transpose()
        .map_err(|_| "the principal is not UTF-8".to_string())?
        .filter(|p| {
            p.split_once(':')
                .is_some_and(|(k, n)| !k.is_empty() && !n.is_empty())
        })
        .ok_or("an Envelope without a principal (TYPE:NAME)")?
        .to_string();
    let address = &request.client_host_address;
    let peer = match address.len() {
        0 => None,
        4 => Some(IpAddr::from(
            <[u8; 4]>::try_from(&address[..]).expect("4 bytes"),
        )),
        16 => Some(IpAddr::from(
            <[u8; 16]>::try_from(&address[..]).expect("16 bytes"),
        )),
        n => return Err(format!("a client address of {n} bytes")),
    };
    Ok(Opened {
        frame: request.request_data,
        principal,
        peer,
    })
}

/// The Envelope answer carrying `inner` (the client's answer frame with its
/// length prefix; none for a request without one) or refusing with `code`.
pub fn answer(inner: Option<Bytes>, code: i16) -> EnvelopeResponse {
    EnvelopeResponse::default()
        .with_response_data(inner.map(|frame| frame.slice(4.min(frame.len())..)))
        .with_error_code(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn a_wrapped_request_opens_as_it_was_sent() {
        let frame = b"\x00\x13\x00\x05\x00\x00\x00\x07inner request".to_vec();
        let session = Session::new("User:alice", "10.1.2.3");
        let peer: IpAddr = "10.1.2.3".parse().unwrap();
        let wrapped = wrap(&frame, &session, Some(peer), 2).unwrap();
        let request = protocol::codec::decode_header(wrapped).unwrap();
        assert_eq!(request.api_key, ApiKey::Envelope);
        let opened = open(request.body, request.api_version).unwrap();
        assert_eq!(&opened.frame[..], &frame[..]);
        assert_eq!(opened.principal, "User:alice");
        assert_eq!(opened.peer, Some(peer));
    }

    #[test]
    fn an_answer_unwraps_to_the_clients_frame_and_a_refusal_says_so() {
        let inner = Bytes::from_static(b"\x00\x00\x00\x06\x00\x00\x00\x07ok");
        let respond = |response: &EnvelopeResponse| {
            let mut out = BytesMut::new();
            out.extend_from_slice(&[0, 0, 0, 0]);
            ResponseHeader::default()
                .with_correlation_id(0)
                .encode(&mut out, RESPONSE_HEADER_VERSION)
                .unwrap();
            response.encode(&mut out, VERSION).unwrap();
            let len = (out.len() - 4) as u32;
            out[..4].copy_from_slice(&len.to_be_bytes());
            out.freeze()
        };
        let answered = respond(&answer(Some(inner.clone()), 0));
        assert_eq!(unwrap(&answered).unwrap(), inner);
        let refused = respond(&answer(None, crate::errors::CLUSTER_AUTHORIZATION_FAILED));
        assert!(unwrap(&refused)
            .unwrap_err()
            .contains("CLUSTER_AUTHORIZATION_FAILED"));
    }

    #[test]
    fn an_envelope_without_a_principal_or_with_a_bad_address_is_refused() {
        for (principal, address) in [
            (None, Bytes::new()),
            (Some(Bytes::from_static(b"alice")), Bytes::new()),
            (
                Some(Bytes::from_static(b"User:alice")),
                Bytes::from_static(b"\x01\x02\x03"),
            ),
        ] {
            let request = EnvelopeRequest::default()
                .with_request_data(Bytes::from_static(b"x"))
                .with_request_principal(principal)
                .with_client_host_address(address);
            let mut body = BytesMut::new();
            request.encode(&mut body, VERSION).unwrap();
            assert!(open(body.freeze(), VERSION).is_err());
        }
    }
}
