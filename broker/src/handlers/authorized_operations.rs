//! Authorized-operations bit fields (Metadata, DescribeCluster,
//! DescribeTopicPartitions, DescribeGroups), one bit per ACL operation
//! code. Without an authorizer every operation the resource type supports
//! is allowed, as Kafka answers; with one, the handlers' fields are then
//! narrowed to what the authorizer allows the principal
//! ([`restrict`], Kafka's `authorizedOperations`).

/// ACL operation codes (Kafka's `AclOperation`).
const READ: u8 = 3;
const WRITE: u8 = 4;
const CREATE: u8 = 5;
const DELETE: u8 = 6;
const ALTER: u8 = 7;
const DESCRIBE: u8 = 8;
const CLUSTER_ACTION: u8 = 9;
const DESCRIBE_CONFIGS: u8 = 10;
const ALTER_CONFIGS: u8 = 11;
const IDEMPOTENT_WRITE: u8 = 12;

/// What the schemas send when the client did not ask for operations.
pub const NOT_REQUESTED: i32 = i32::MIN;

const fn bits(operations: &[u8]) -> i32 {
    let mut field = 0i32;
    let mut i = 0;
    while i < operations.len() {
        field |= 1 << operations[i];
        i += 1;
    }
    field
}

/// Operations a topic supports (read, write, create, delete, alter,
/// describe, describe and alter configs).
pub const TOPIC: i32 = bits(&[
    READ,
    WRITE,
    CREATE,
    DELETE,
    ALTER,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
]);

/// Operations the cluster supports.
pub const CLUSTER: i32 = bits(&[
    CREATE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
    ALTER,
    DESCRIBE,
]);

/// Operations a group supports (read, describe, delete, and since group
/// configs describe and alter configs).
pub const GROUP: i32 = bits(&[READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS]);

/// The field for a topic: all its operations when asked for.
pub fn topic(requested: bool) -> i32 {
    if requested {
        TOPIC
    } else {
        NOT_REQUESTED
    }
}

/// The field for a group: all its operations when asked for.
pub fn group(requested: bool) -> i32 {
    if requested {
        GROUP
    } else {
        NOT_REQUESTED
    }
}

/// The field for the cluster: all its operations when asked for.
pub fn cluster(requested: bool) -> i32 {
    if requested {
        CLUSTER
    } else {
        NOT_REQUESTED
    }
}

/// `field` (a resource type's supported operations, or
/// [`NOT_REQUESTED`]) narrowed to those `allows` grants.
pub fn restrict(field: i32, allows: impl Fn(i8) -> bool) -> i32 {
    if field == NOT_REQUESTED {
        return field;
    }
    (0..31)
        .filter(|op| field & (1 << op) != 0)
        .filter(|&op| allows(op as i8))
        .fold(0, |bits, op| bits | (1 << op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_kafkas_values_without_an_authorizer() {
        // The values a Kafka broker without an authorizer sends.
        assert_eq!(TOPIC, 3576);
        assert_eq!(CLUSTER, 8096);
        assert_eq!(GROUP, 3400);
        assert_eq!(topic(false), i32::MIN);
        assert_eq!(cluster(true), 8096);
    }

    #[test]
    fn restricting_keeps_only_what_is_allowed_and_leaves_not_requested() {
        assert_eq!(restrict(NOT_REQUESTED, |_| false), NOT_REQUESTED);
        assert_eq!(restrict(TOPIC, |_| true), TOPIC);
        assert_eq!(restrict(TOPIC, |_| false), 0);
        let read_describe = restrict(TOPIC, |op| op == READ as i8 || op == DESCRIBE as i8);
        assert_eq!(read_describe, (1 << READ) | (1 << DESCRIBE));
        // An operation the resource does not support is never reported.
        assert_eq!(restrict(GROUP, |op| op == WRITE as i8), 0);
    }
}
