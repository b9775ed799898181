//! Raw Kafka requests over a plain TCP stream, for tests that need exact
//! bytes, exact error codes or a pipelining no client library would send.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use protocol::kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use protocol::kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

/// How long a raw read or write may block before the test fails.
const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// A connection to the broker whose reads and writes fail after
/// [`IO_TIMEOUT`] instead of hanging the test.
pub fn connect(broker: &super::Broker) -> TcpStream {
    let stream = TcpStream::connect(broker.address())
        .unwrap_or_else(|e| panic!("connect: {e}\nbroker log:\n{}", broker.log()));
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    stream
}

/// One request frame: length prefix, request header, body.
pub fn frame<T: Encodable>(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &T,
) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
    let mut payload = BytesMut::new();
    header
        .encode(&mut payload, api_key.request_header_version(version))
        .unwrap();
    body.encode(&mut payload, version).unwrap();
    let mut out = (payload.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&payload);
    out
}

/// Reads one response frame (without its length prefix).
pub fn read_frame(stream: &mut TcpStream) -> Bytes {
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).expect("a response");
    let mut body = vec![0u8; i32::from_be_bytes(length) as usize];
    stream.read_exact(&mut body).unwrap();
    Bytes::from(body)
}

/// Reads one response and decodes it, checking its correlation id.
pub fn read_response<R: Decodable + HeaderVersion>(
    stream: &mut TcpStream,
    version: i16,
    correlation_id: i32,
) -> R {
    let mut body = read_frame(stream);
    let header = ResponseHeader::decode(&mut body, R::header_version(version)).unwrap();
    assert_eq!(header.correlation_id, correlation_id);
    R::decode(&mut body, version).unwrap()
}

/// Sends one request and decodes its response.
pub fn call<Req: Encodable, Resp: Decodable + HeaderVersion>(
    stream: &mut TcpStream,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &Req,
) -> Resp {
    stream
        .write_all(&frame(api_key, version, correlation_id, client_id, body))
        .unwrap();
    read_response(stream, version, correlation_id)
}

/// The node coordinating `key` (`key_type` 0: a group, 1: a transactional
/// id), as `broker` answers FindCoordinator v3; `None` while it cannot
/// say (no connection, an error code).
pub fn find_coordinator(broker: &super::Broker, key: &str, key_type: i8) -> Option<i32> {
    use protocol::kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
    let mut stream = TcpStream::connect(broker.address()).ok()?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).ok()?;
    let found: FindCoordinatorResponse = call(
        &mut stream,
        ApiKey::FindCoordinator,
        3,
        1,
        "find-coordinator",
        &FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(key.to_string()))
            .with_key_type(key_type),
    );
    (found.error_code == 0 && found.node_id.0 >= 0).then_some(found.node_id.0)
}

/// Sets a group config (IncrementalAlterConfigs v1 on the GROUP resource)
/// and returns the resource's error code.
#[allow(dead_code)]
pub fn alter_group_config(broker: &super::Broker, group: &str, key: &str, value: &str) -> i16 {
    use protocol::kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use protocol::kafka_protocol::messages::{
        IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    };
    let text = |v: &str| StrBytes::from_string(v.to_string());
    let mut stream = connect(broker);
    let altered: IncrementalAlterConfigsResponse = call(
        &mut stream,
        ApiKey::IncrementalAlterConfigs,
        1,
        1,
        "group-config",
        &IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(32)
                .with_resource_name(text(group))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(text(key))
                    .with_config_operation(0)
                    .with_value(Some(text(value)))]),
        ]),
    );
    altered.responses[0].error_code
}
