//! CreateAcls (30), DescribeAcls (29) and DeleteAcls (31), versions 1–3:
//! the ACLs of the replicated metadata the built-in authorizer decides by
//! (`crate::authorizer`). Create and Delete are decided by the active
//! controller (other brokers forward them); Describe answers from any
//! broker's metadata. Without an authorizer (`authorizer.class.name`
//! unset) each answers SECURITY_DISABLED, as Kafka does. A binding or a
//! filter Kafka refuses gets INVALID_REQUEST with the reason.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::{invalid_binding, AclFilter};
use crate::controller;
use crate::errors;
use crate::metadata::AclBinding;
use crate::shard::Shard;

pub const VERSION_MIN: i16 = 1;
pub const VERSION_MAX: i16 = 3;

const NO_AUTHORIZER: &str = "No Authorizer is configured (authorizer.class.name).";

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

pub async fn create(shard: &Rc<Shard>, request: CreateAclsRequest) -> CreateAclsResponse {
    let refused = |code: i16, message: String| {
        AclCreationResult::default()
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message)))
    };
    if shard.config.authorizer.is_none() {
        return CreateAclsResponse::default().with_results(
            request
                .creations
                .iter()
                .map(|_| refused(errors::SECURITY_DISABLED, NO_AUTHORIZER.to_string()))
                .collect(),
        );
    }
    let bindings: Vec<AclBinding> = request
        .creations
        .iter()
        .map(|c| AclBinding {
            resource_type: c.resource_type,
            resource_name: c.resource_name.to_string(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: c.operation,
            permission_type: c.permission_type,
        })
        .collect();
    let valid: Vec<AclBinding> = bindings
        .iter()
        .filter(|b| invalid_binding(b).is_none())
        .cloned()
        .collect();
    let outcome = if valid.is_empty() {
        Ok(())
    } else {
        controller::create_acls(shard, valid).await
    };
    CreateAclsResponse::default().with_results(
        bindings
            .iter()
            .map(|binding| match (invalid_binding(binding), &outcome) {
                (Some(why), _) => refused(errors::INVALID_REQUEST, why),
                (None, Err(refusal)) => refused(refusal.error_code, refusal.message.clone()),
                (None, Ok(())) => AclCreationResult::default(),
            })
            .collect(),
    )
}

fn filter_of(
    resource_type: i8,
    name: &Option<StrBytes>,
    pattern_type: i8,
    principal: &Option<StrBytes>,
    host: &Option<StrBytes>,
    operation: i8,
    permission_type: i8,
) -> AclFilter {
    AclFilter {
        resource_type,
        resource_name: name.as_ref().map(|n| n.to_string()),
        pattern_type,
        principal: principal.as_ref().map(|p| p.to_string()),
        host: host.as_ref().map(|h| h.to_string()),
        operation,
        permission_type,
    }
}

pub fn describe(shard: &Shard, request: DescribeAclsRequest) -> DescribeAclsResponse {
    let refused = |code: i16, message: String| {
        DescribeAclsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message)))
    };
    if shard.config.authorizer.is_none() {
        return refused(errors::SECURITY_DISABLED, NO_AUTHORIZER.to_string());
    }
    let filter = filter_of(
        request.resource_type_filter,
        &request.resource_name_filter,
        request.pattern_type_filter,
        &request.principal_filter,
        &request.host_filter,
        request.operation,
        request.permission_type,
    );
    if let Some(why) = filter.invalid() {
        return refused(errors::INVALID_REQUEST, why);
    }
    let image = shard.metadata.image();
    let mut resources: BTreeMap<(i8, &str, i8), Vec<AclDescription>> = BTreeMap::new();
    for acl in image.acls.iter().filter(|a| filter.matches(a)) {
        resources
            .entry((acl.resource_type, &acl.resource_name, acl.pattern_type))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(text(&acl.principal))
                    .with_host(text(&acl.host))
                    .with_operation(acl.operation)
                    .with_permission_type(acl.permission_type),
            );
    }
    DescribeAclsResponse::default().with_resources(
        resources
            .into_iter()
            .map(|((kind, name, pattern), acls)| {
                DescribeAclsResource::default()
                    .with_resource_type(kind)
                    .with_resource_name(text(name))
                    .with_pattern_type(pattern)
                    .with_acls(acls)
            })
            .collect(),
    )
}

pub async fn delete(shard: &Rc<Shard>, request: DeleteAclsRequest) -> DeleteAclsResponse {
    let refused = |code: i16, message: String| {
        DeleteAclsFilterResult::default()
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message)))
    };
    if shard.config.authorizer.is_none() {
        return DeleteAclsResponse::default().with_filter_results(
            request
                .filters
                .iter()
                .map(|_| refused(errors::SECURITY_DISABLED, NO_AUTHORIZER.to_string()))
                .collect(),
        );
    }
    let filters: Vec<AclFilter> = request
        .filters
        .iter()
        .map(|f| {
            filter_of(
                f.resource_type_filter,
                &f.resource_name_filter,
                f.pattern_type_filter,
                &f.principal_filter,
                &f.host_filter,
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let valid: Vec<AclFilter> = filters
        .iter()
        .filter(|f| f.invalid().is_none())
        .cloned()
        .collect();
    let outcome = controller::delete_acls(shard, valid).await;
    let mut deleted = outcome.as_ref().ok().map(|d| d.iter());
    DeleteAclsResponse::default().with_filter_results(
        filters
            .iter()
            .map(|filter| {
                if let Some(why) = filter.invalid() {
                    return refused(errors::INVALID_REQUEST, why);
                }
                match (&outcome, deleted.as_mut().and_then(|d| d.next())) {
                    (Err(refusal), _) => refused(refusal.error_code, refusal.message.clone()),
                    (Ok(_), matched) => DeleteAclsFilterResult::default().with_matching_acls(
                        matched
                            .into_iter()
                            .flatten()
                            .map(|acl| {
                                DeleteAclsMatchingAcl::default()
                                    .with_resource_type(acl.resource_type)
                                    .with_resource_name(text(&acl.resource_name))
                                    .with_pattern_type(acl.pattern_type)
                                    .with_principal(text(&acl.principal))
                                    .with_host(text(&acl.host))
                                    .with_operation(acl.operation)
                                    .with_permission_type(acl.permission_type)
                            })
                            .collect(),
                    ),
                }
            })
            .collect(),
    )
}
