//! ApiVersions (18), versions 0–3. A request at any other version gets the
//! v0 answer with UNSUPPORTED_VERSION and this range, without its header
//! or body being parsed (see `handlers::handle`).

use kafka_protocol::messages::ApiVersionsResponse;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 3;

pub fn handle() -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(super::advertised())
}
