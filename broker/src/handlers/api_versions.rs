//! ApiVersions (18), versions 0–4. A request at any other version gets the
//! v0 answer with UNSUPPORTED_VERSION and this range, without its header
//! or body being parsed (see `handlers::handle`).
//!
//! v3+ also carry the features a Kafka 4.0 broker reports (KIP-584):
//! metadata.version up to 4.0's (finalized there); group.version
//! finalized at 1 (KIP-848's consumer groups are served); share.version
//! finalized at 1 (KIP-932's share groups are served); kraft.version
//! and eligible.leader.replicas.version supported from 0 and finalized at
//! 0, which Kafka leaves out of the finalized list (no ELR).
//! transaction.version is not reported at all, so clients keep the
//! classic transaction flow. Before v4 a feature whose minimum is 0 is
//! left out, as Kafka does: older clients refuse a 0 minimum.

use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::protocol::StrBytes;

pub const VERSION_MIN: i16 = 0;
pub const VERSION_MAX: i16 = 4;

/// metadata.version levels: 3.3-IV3, the oldest Kafka 4.0 accepts, to
/// 4.0-IV3.
const METADATA_VERSION_MIN: i16 = 7;
const METADATA_VERSION_MAX: i16 = 25;

/// (name, min supported, max supported, finalized level).
const FEATURES: [(&str, i16, i16, i16); 5] = [
    (
        "metadata.version",
        METADATA_VERSION_MIN,
        METADATA_VERSION_MAX,
        METADATA_VERSION_MAX,
    ),
    ("kraft.version", 0, 1, 0),
    ("group.version", 0, 1, 1),
    ("eligible.leader.replicas.version", 0, 1, 0),
    ("share.version", 0, 1, 1),
];

/// The finalized levels never change: their epoch is that of the first
/// metadata.
const FINALIZED_FEATURES_EPOCH: i64 = 0;

pub fn handle(version: i16) -> ApiVersionsResponse {
    let response = ApiVersionsResponse::default().with_api_keys(super::advertised());
    if version < 3 {
        return response;
    }
    let supported = FEATURES
        .iter()
        .filter(|&&(_, min, _, _)| version >= 4 || min > 0)
        .map(|&(name, min, max, _)| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    let finalized = FEATURES
        .iter()
        .filter(|&&(_, _, _, level)| level > 0)
        .map(|&(name, _, _, level)| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version_level(level)
                .with_max_version_level(level)
        })
        .collect();
    response
        .with_supported_features(supported)
        .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
        .with_finalized_features(finalized)
}
