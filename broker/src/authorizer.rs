//! The built-in authorizer: Kafka's StandardAuthorizer semantics over the
//! ACLs of the replicated metadata. Plain functions of the ACL set, so
//! every broker decides alike and the rules are tested without one.
//!
//! A request is allowed when its principal is a super user; else an ACL
//! that matches the resource (a literal pattern of its name or `*`, or a
//! prefixed pattern its name starts with), the principal (or `User:*`),
//! the host (or `*`) and the operation (or ALL) decides: a DENY wins over
//! any ALLOW. An ALLOW of READ, WRITE, DELETE or ALTER also allows
//! DESCRIBE, one of ALTER_CONFIGS also DESCRIBE_CONFIGS. With no ACL on
//! the resource at all, `allow.everyone.if.no.acl.found` decides (false
//! by default).

use std::collections::BTreeSet;

use crate::metadata::AclBinding;

/// Kafka's `ResourceType` codes.
pub mod resource {
    pub const ANY: i8 = 1;
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;
}

/// Kafka's `PatternType` codes.
pub mod pattern {
    pub const ANY: i8 = 1;
    pub const MATCH: i8 = 2;
    pub const LITERAL: i8 = 3;
    pub const PREFIXED: i8 = 4;
}

/// Kafka's `AclOperation` codes.
pub mod operation {
    pub const ANY: i8 = 1;
    pub const ALL: i8 = 2;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const CREATE: i8 = 5;
    pub const DELETE: i8 = 6;
    pub const ALTER: i8 = 7;
    pub const DESCRIBE: i8 = 8;
    pub const CLUSTER_ACTION: i8 = 9;
    pub const DESCRIBE_CONFIGS: i8 = 10;
    pub const ALTER_CONFIGS: i8 = 11;
    pub const IDEMPOTENT_WRITE: i8 = 12;
    pub const CREATE_TOKENS: i8 = 13;
    pub const DESCRIBE_TOKENS: i8 = 14;
}

/// Kafka's `AclPermissionType` codes.
pub mod permission {
    pub const ANY: i8 = 1;
    pub const DENY: i8 = 2;
    pub const ALLOW: i8 = 3;
}

/// `authorizer.class.name` values that switch on the built-in authorizer:
/// Kafka's KRaft authorizer and its ZooKeeper-era one.
pub const CLASS_NAMES: [&str; 2] = [
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
];

/// The name of the one CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The literal pattern name that matches every resource of its type.
pub const WILDCARD: &str = "*";
/// The principal of a connection that did not authenticate.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// The names Kafka's tools print, by code.
pub fn resource_name(code: i8) -> &'static str {
    match code {
        resource::ANY => "ANY",
        resource::TOPIC => "TOPIC",
        resource::GROUP => "GROUP",
        resource::CLUSTER => "CLUSTER",
        resource::TRANSACTIONAL_ID => "TRANSACTIONAL_ID",
        resource::DELEGATION_TOKEN => "DELEGATION_TOKEN",
        resource::USER => "USER",
        _ => "UNKNOWN",
    }
}

pub fn pattern_name(code: i8) -> &'static str {
    match code {
        pattern::ANY => "ANY",
        pattern::MATCH => "MATCH",
        pattern::LITERAL => "LITERAL",
        pattern::PREFIXED => "PREFIXED",
        _ => "UNKNOWN",
    }
}

pub const OPERATIONS: [(i8, &str); 13] = [
    (operation::ALL, "ALL"),
    (operation::READ, "READ"),
    (operation::WRITE, "WRITE"),
    (operation::CREATE, "CREATE"),
    (operation::DELETE, "DELETE"),
    (operation::ALTER, "ALTER"),
    (operation::DESCRIBE, "DESCRIBE"),
    (operation::CLUSTER_ACTION, "CLUSTER_ACTION"),
    (operation::DESCRIBE_CONFIGS, "DESCRIBE_CONFIGS"),
    (operation::ALTER_CONFIGS, "ALTER_CONFIGS"),
    (operation::IDEMPOTENT_WRITE, "IDEMPOTENT_WRITE"),
    (operation::CREATE_TOKENS, "CREATE_TOKENS"),
    (operation::DESCRIBE_TOKENS, "DESCRIBE_TOKENS"),
];

pub fn operation_name(code: i8) -> &'static str {
    if code == operation::ANY {
        return "ANY";
    }
    OPERATIONS
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("UNKNOWN", |(_, n)| n)
}

pub fn permission_name(code: i8) -> &'static str {
    match code {
        permission::ANY => "ANY",
        permission::DENY => "DENY",
        permission::ALLOW => "ALLOW",
        _ => "UNKNOWN",
    }
}

/// Who asks: the principal (`User:name`) and the host it connects from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub principal: String,
    pub host: String,
}

impl Session {
    pub fn new(principal: impl Into<String>, host: impl Into<String>) -> Session {
        Session {
            principal: principal.into(),
            host: host.into(),
        }
    }
}

/// The authorizer's settings and the ACLs it decides with.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    /// `super.users`: principals allowed everything.
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_if_no_acl: bool,
}

impl Authorizer {
    /// Whether `session` may do `op` on the resource (`kind`, `name`),
    /// given `acls`.
    pub fn allows(
        &self,
        acls: &BTreeSet<AclBinding>,
        session: &Session,
        op: i8,
        kind: i8,
        name: &str,
    ) -> bool {
        if self.super_users.iter().any(|s| s == &session.principal) {
            return true;
        }
        let mut on_resource = false;
        let mut allowed = false;
        for acl in acls.iter().filter(|a| resource_matches(a, kind, name)) {
            on_resource = true;
            let principal = acl.principal == session.principal || acl.principal == "User:*";
            let host = acl.host == WILDCARD || acl.host == session.host;
            if !principal || !host {
                continue;
            }
            match acl.permission_type {
                permission::DENY if acl.operation == op || acl.operation == operation::ALL => {
                    return false;
                }
                permission::ALLOW if implies(acl.operation, op) => allowed = true,
                _ => {}
            }
        }
        allowed || (!on_resource && self.allow_if_no_acl)
    }
}

/// Whether an ACL pattern applies to the resource (`kind`, `name`).
fn resource_matches(acl: &AclBinding, kind: i8, name: &str) -> bool {
    acl.resource_type == kind
        && match acl.pattern_type {
            pattern::LITERAL => acl.resource_name == name || acl.resource_name == WILDCARD,
            pattern::PREFIXED => name.starts_with(&acl.resource_name),
            _ => false,
        }
}

/// Whether an ALLOW of `granted` allows `wanted`.
fn implies(granted: i8, wanted: i8) -> bool {
    granted == wanted
        || granted == operation::ALL
        || (wanted == operation::DESCRIBE
            && matches!(
                granted,
                operation::READ | operation::WRITE | operation::DELETE | operation::ALTER
            ))
        || (wanted == operation::DESCRIBE_CONFIGS && granted == operation::ALTER_CONFIGS)
}

/// A DescribeAcls or DeleteAcls filter; `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission_type: i8,
}

impl AclFilter {
    /// Whether `acl` matches, as Kafka's AclBindingFilter matches: ANY
    /// pattern type takes either with the exact name, MATCH every pattern
    /// that applies to the named resource.
    pub fn matches(&self, acl: &AclBinding) -> bool {
        let kind = self.resource_type == resource::ANY || self.resource_type == acl.resource_type;
        let name = match (&self.resource_name, self.pattern_type) {
            (None, pattern::MATCH | pattern::ANY) => true,
            (None, wanted) => wanted == acl.pattern_type,
            (Some(name), pattern::MATCH) => match acl.pattern_type {
                pattern::LITERAL => &acl.resource_name == name || acl.resource_name == WILDCARD,
                pattern::PREFIXED => name.starts_with(&acl.resource_name),
                _ => false,
            },
            (Some(name), pattern::ANY) => &acl.resource_name == name,
            (Some(name), wanted) => wanted == acl.pattern_type && &acl.resource_name == name,
        };
        let principal = self.principal.as_ref().is_none_or(|p| p == &acl.principal);
        let host = self.host.as_ref().is_none_or(|h| h == &acl.host);
        let op = self.operation == operation::ANY || self.operation == acl.operation;
        let permission =
            self.permission_type == permission::ANY || self.permission_type == acl.permission_type;
        kind && name && principal && host && op && permission
    }

    /// Why Kafka refuses the filter (INVALID_REQUEST), if it does.
    pub fn invalid(&self) -> Option<String> {
        if !(resource::ANY..=resource::USER).contains(&self.resource_type) {
            return Some(format!("unknown resource type {}", self.resource_type));
        }
        if !(pattern::ANY..=pattern::PREFIXED).contains(&self.pattern_type) {
            return Some(format!("unknown pattern type {}", self.pattern_type));
        }
        if !(operation::ANY..=operation::DESCRIBE_TOKENS).contains(&self.operation) {
            return Some(format!("unknown operation {}", self.operation));
        }
        if !(permission::ANY..=permission::ALLOW).contains(&self.permission_type) {
            return Some(format!("unknown permission type {}", self.permission_type));
        }
        None
    }
}

/// Why an ACL cannot be created (INVALID_REQUEST), if it cannot.
pub fn invalid_binding(acl: &AclBinding) -> Option<String> {
    if !(resource::TOPIC..=resource::USER).contains(&acl.resource_type) {
        return Some(format!(
            "an ACL needs a concrete resource type, not {}",
            resource_name(acl.resource_type)
        ));
    }
    if acl.pattern_type != pattern::LITERAL && acl.pattern_type != pattern::PREFIXED {
        return Some(format!(
            "an ACL's pattern type is LITERAL or PREFIXED, not {}",
            pattern_name(acl.pattern_type)
        ));
    }
    if acl.resource_name.is_empty() {
        return Some("the resource name is empty".to_string());
    }
    if acl.resource_type == resource::CLUSTER && acl.resource_name != CLUSTER_NAME {
        return Some(format!("the cluster resource is named {CLUSTER_NAME}"));
    }
    if !(operation::ALL..=operation::DESCRIBE_TOKENS).contains(&acl.operation) {
        return Some(format!(
            "an ACL needs a concrete operation, not {}",
            operation_name(acl.operation)
        ));
    }
    if acl.permission_type != permission::ALLOW && acl.permission_type != permission::DENY {
        return Some(format!(
            "an ACL's permission is ALLOW or DENY, not {}",
            permission_name(acl.permission_type)
        ));
    }
    match acl.principal.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
        _ => {
            return Some(format!(
                "principal {:?} is not TYPE:NAME (User:alice, User:*)",
                acl.principal
            ))
        }
    }
    if acl.host.is_empty() {
        return Some("the host is empty (`*` for any)".to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(kind: i8, name: &str, pattern: i8, who: &str, op: i8, allow: bool) -> AclBinding {
        AclBinding {
            resource_type: kind,
            resource_name: name.to_string(),
            pattern_type: pattern,
            principal: who.to_string(),
            host: "*".to_string(),
            operation: op,
            permission_type: if allow {
                permission::ALLOW
            } else {
                permission::DENY
            },
        }
    }

    fn alice() -> Session {
        Session::new("User:alice", "127.0.0.1")
    }

    #[test]
    fn principals_operations_and_patterns_decide_and_deny_wins() {
        use operation::*;
        let acls: BTreeSet<AclBinding> = [
            acl(
                resource::TOPIC,
                "orders",
                pattern::LITERAL,
                "User:alice",
                READ,
                true,
            ),
            acl(
                resource::TOPIC,
                "pay-",
                pattern::PREFIXED,
                "User:alice",
                WRITE,
                true,
            ),
            acl(
                resource::TOPIC,
                "pay-secret",
                pattern::LITERAL,
                "User:alice",
                ALL,
                false,
            ),
            acl(
                resource::TOPIC,
                "*",
                pattern::LITERAL,
                "User:*",
                DESCRIBE,
                true,
            ),
            acl(
                resource::GROUP,
                "g",
                pattern::LITERAL,
                "User:bob",
                READ,
                true,
            ),
            acl(
                resource::TOPIC,
                "configs",
                pattern::LITERAL,
                "User:alice",
                ALTER_CONFIGS,
                true,
            ),
        ]
        .into();
        let authorizer = Authorizer::default();
        let alice = alice();
        let bob = Session::new("User:bob", "127.0.0.1");
        let cases = [
            (&alice, READ, resource::TOPIC, "orders", true),
            (&alice, WRITE, resource::TOPIC, "orders", false),
            (&alice, DESCRIBE, resource::TOPIC, "orders", true),
            (&bob, READ, resource::TOPIC, "orders", false),
            (&bob, DESCRIBE, resource::TOPIC, "orders", true),
            (&alice, WRITE, resource::TOPIC, "pay-eu", true),
            (&alice, DESCRIBE, resource::TOPIC, "pay-eu", true),
            (&alice, WRITE, resource::TOPIC, "pay-secret", false),
            (&alice, DESCRIBE, resource::TOPIC, "pay-secret", false),
            (&alice, WRITE, resource::TOPIC, "payments", false),
            (&bob, READ, resource::GROUP, "g", true),
            (&alice, READ, resource::GROUP, "g", false),
            (&alice, DESCRIBE_CONFIGS, resource::TOPIC, "configs", true),
            (&alice, ALTER, resource::TOPIC, "configs", false),
            // No ACL on the resource: denied unless allowed by setting.
            (&alice, CREATE, resource::CLUSTER, CLUSTER_NAME, false),
        ];
        for (session, op, kind, name, wanted) in cases {
            assert_eq!(
                authorizer.allows(&acls, session, op, kind, name),
                wanted,
                "{} {} {} {name}",
                session.principal,
                operation_name(op),
                resource_name(kind)
            );
        }
        let open = Authorizer {
            allow_if_no_acl: true,
            ..Authorizer::default()
        };
        assert!(open.allows(&acls, &alice, CREATE, resource::CLUSTER, CLUSTER_NAME));
        assert!(!open.allows(&acls, &alice, WRITE, resource::TOPIC, "orders"));
        let root = Authorizer {
            super_users: vec!["User:alice".to_string()],
            ..Authorizer::default()
        };
        assert!(root.allows(&acls, &alice, WRITE, resource::TOPIC, "pay-secret"));
    }

    #[test]
    fn hosts_narrow_an_acl() {
        let mut binding = acl(
            resource::TOPIC,
            "t",
            pattern::LITERAL,
            "User:alice",
            operation::READ,
            true,
        );
        binding.host = "10.0.0.7".to_string();
        let acls: BTreeSet<AclBinding> = [binding].into();
        let authorizer = Authorizer::default();
        assert!(!authorizer.allows(&acls, &alice(), operation::READ, resource::TOPIC, "t"));
        let there = Session::new("User:alice", "10.0.0.7");
        assert!(authorizer.allows(&acls, &there, operation::READ, resource::TOPIC, "t"));
    }

    #[test]
    fn filters_match_as_kafkas_binding_filters() {
        let literal = acl(
            resource::TOPIC,
            "pay-eu",
            pattern::LITERAL,
            "User:a",
            3,
            true,
        );
        let prefixed = acl(
            resource::TOPIC,
            "pay-",
            pattern::PREFIXED,
            "User:a",
            3,
            true,
        );
        let wildcard = acl(resource::TOPIC, "*", pattern::LITERAL, "User:b", 4, false);
        let filter = |name: Option<&str>, pattern: i8| AclFilter {
            resource_type: resource::TOPIC,
            resource_name: name.map(str::to_string),
            pattern_type: pattern,
            principal: None,
            host: None,
            operation: operation::ANY,
            permission_type: permission::ANY,
        };
        let matched = |f: &AclFilter| {
            [&literal, &prefixed, &wildcard]
                .iter()
                .filter(|a| f.matches(a))
                .count()
        };
        assert_eq!(matched(&filter(None, pattern::ANY)), 3);
        assert_eq!(matched(&filter(None, pattern::PREFIXED)), 1);
        assert_eq!(matched(&filter(Some("pay-eu"), pattern::ANY)), 1);
        assert_eq!(matched(&filter(Some("pay-eu"), pattern::MATCH)), 3);
        assert_eq!(matched(&filter(Some("pay-"), pattern::PREFIXED)), 1);
        assert_eq!(matched(&filter(Some("other"), pattern::MATCH)), 1);
        let mut by_principal = filter(None, pattern::ANY);
        by_principal.principal = Some("User:b".to_string());
        by_principal.permission_type = permission::DENY;
        assert_eq!(matched(&by_principal), 1);
        assert!(filter(None, 9).invalid().is_some());
    }

    #[test]
    fn bindings_kafka_refuses_are_refused_with_a_reason() {
        let good = acl(resource::TOPIC, "t", pattern::LITERAL, "User:a", 3, true);
        assert_eq!(invalid_binding(&good), None);
        let bad = [
            AclBinding {
                resource_type: resource::ANY,
                ..good.clone()
            },
            AclBinding {
                pattern_type: pattern::MATCH,
                ..good.clone()
            },
            AclBinding {
                operation: operation::ANY,
                ..good.clone()
            },
            AclBinding {
                permission_type: permission::ANY,
                ..good.clone()
            },
            AclBinding {
                principal: "alice".to_string(),
                ..good.clone()
            },
            AclBinding {
                resource_type: resource::CLUSTER,
                resource_name: "other".to_string(),
                ..good.clone()
            },
            AclBinding {
                resource_name: String::new(),
                ..good.clone()
            },
        ];
        for binding in bad {
            assert!(invalid_binding(&binding).is_some(), "{binding:?}");
        }
    }
}
