//! Decoding the topics of a consumer-protocol subscription. It stands
//! alone because it belongs with the protocol crate's codecs.

/// The topics of a consumer-protocol subscription (version i16, topics
/// array of strings, ...). `None` if it does not decode.
pub fn consumer_subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut at = 2usize;
    let read_i32 = |at: &mut usize| -> Option<i32> {
        let bytes = metadata.get(*at..*at + 4)?;
        *at += 4;
        Some(i32::from_be_bytes(bytes.try_into().ok()?))
    };
    metadata.get(..2)?;
    let count = read_i32(&mut at)?;
    if count < 0 || count as usize > metadata.len() {
        return None;
    }
    let mut topics = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = i16::from_be_bytes(metadata.get(at..at + 2)?.try_into().ok()?);
        at += 2;
        if len < 0 {
            return None;
        }
        let name = metadata.get(at..at + len as usize)?;
        at += len as usize;
        topics.push(String::from_utf8(name.to_vec()).ok()?);
    }
    Some(topics)
}
