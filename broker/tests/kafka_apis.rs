//! Kafka APIs answered as a Kafka broker without an authorizer answers
//! them: version negotiation, authorized operations and the admin APIs
//! that describe the broker's own state, through real clients where one
//! sends the request and through raw frames where none does.

mod common;

use std::io::Write;

use bytes::Buf;
use common::{raw, Broker};
use protocol::kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use protocol::kafka_protocol::protocol::{Decodable, StrBytes};

/// An ApiVersions request frame at `version`, with a flexible (v2) or a
/// plain (v1) request header, as a client probing versions may send it.
fn api_versions_frame(version: i16, correlation_id: i32, flexible_header: bool) -> Vec<u8> {
    let client_id = b"probe";
    let mut payload = Vec::new();
    payload.extend_from_slice(&(ApiKey::ApiVersions as i16).to_be_bytes());
    payload.extend_from_slice(&version.to_be_bytes());
    payload.extend_from_slice(&correlation_id.to_be_bytes());
    payload.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    payload.extend_from_slice(client_id);
    if flexible_header {
        payload.push(0); // no tagged fields
        // A v3+ body: client software name and version, no tagged fields.
        payload.extend_from_slice(&[2, b'x', 2, b'1', 0]);
    }
    let mut frame = (payload.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    frame
}

#[test]
fn api_versions_at_any_version_it_does_not_serve_gets_the_v0_answer_with_its_own_range() {
    let broker = Broker::start(&[]);
    let mut stream = raw::connect(&broker);
    let probes = [
        (99, true),
        (99, false),
        (i16::MAX, true),
        (-1, false),
        (i16::MIN, false),
    ];
    for (i, &(version, flexible)) in probes.iter().enumerate() {
        let correlation_id = 1000 + i as i32;
        stream
            .write_all(&api_versions_frame(version, correlation_id, flexible))
            .unwrap();
        let mut response = raw::read_frame(&mut stream);
        assert_eq!(
            response.get_i32(),
            correlation_id,
            "v{version}: response header v0, correlation id only"
        );
        let body = ApiVersionsResponse::decode(&mut response, 0).unwrap();
        assert_eq!(body.error_code, 35, "v{version}: UNSUPPORTED_VERSION");
        let listed: Vec<(i16, i16, i16)> = body
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        assert_eq!(listed.len(), 1, "v{version}: only its own range: {listed:?}");
        assert_eq!(listed[0].0, ApiKey::ApiVersions as i16);
        assert_eq!(listed[0].1, 0);
        assert!(
            (3..=4).contains(&listed[0].2),
            "v{version}: {listed:?}"
        );
        assert!(response.is_empty(), "v{version}: a v0 body and nothing else");
        // The client retries at the version it was told, on the same
        // connection.
        let retried: ApiVersionsResponse = raw::call(
            &mut stream,
            ApiKey::ApiVersions,
            listed[0].2,
            correlation_id,
            "probe",
            &ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("probe"))
                .with_client_software_version(StrBytes::from_static_str("1")),
        );
        assert_eq!(retried.error_code, 0);
        assert!(retried.api_keys.len() > 20, "{:?}", retried.api_keys);
    }
}
