//! Decoding the topics of a consumer-protocol subscription, through the
//! protocol crate's codec (`protocol::consumer_protocol`).

/// The topics of a consumer-protocol subscription (version i16, topics
/// array of strings, ...). `None` if it does not decode.
pub fn consumer_subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    protocol::consumer_protocol::subscription_topics(metadata)
}
