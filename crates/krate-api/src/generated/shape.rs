//! Structural checks: an object must decode as its kind's typed form (k8s-openapi), as
//! upstream's decoder requires, before defaulting or validation look at it — so a
//! `"spec": "text"` is a 400, not a surprise deeper in. The same decode reports the
//! fields the type does not know, for field validation. Generated from the resource
//! table by hack/gen-shape.py.

use serde_json::Value;

use crate::fieldvalidation::UnknownField;

/// Decodes `obj` as `T`, returning the paths of the fields `T` has no place for.
fn decode<T: serde::de::DeserializeOwned>(obj: &Value) -> Result<Vec<UnknownField>, String> {
    let mut unknown = Vec::new();
    serde_ignored::deserialize(obj, |path| unknown.push(UnknownField::from_path(&path)))
        .map(|_: T| unknown)
        .map_err(|e| e.to_string())
}

/// The unknown fields of `obj` when it has the shape of `kind` in `group`/`version` (none
/// for kinds that are not built in); an error when it does not decode.
pub fn check(group: &str, version: &str, kind: &str, obj: &Value) -> Result<Vec<UnknownField>, String> {
    match (group, version, kind) {
        ("", "v1", "Binding") => decode::<k8s_openapi::api::core::v1::Binding>(obj),
        ("", "v1", "ComponentStatus") => decode::<k8s_openapi::api::core::v1::ComponentStatus>(obj),
        ("", "v1", "ConfigMap") => decode::<k8s_openapi::api::core::v1::ConfigMap>(obj),
        ("", "v1", "Endpoints") => decode::<k8s_openapi::api::core::v1::Endpoints>(obj),
        ("", "v1", "Event") => decode::<k8s_openapi::api::core::v1::Event>(obj),
        ("", "v1", "LimitRange") => decode::<k8s_openapi::api::core::v1::LimitRange>(obj),
        ("", "v1", "Namespace") => decode::<k8s_openapi::api::core::v1::Namespace>(obj),
        ("", "v1", "Node") => decode::<k8s_openapi::api::core::v1::Node>(obj),
        ("", "v1", "PersistentVolumeClaim") => decode::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(obj),
        ("", "v1", "PersistentVolume") => decode::<k8s_openapi::api::core::v1::PersistentVolume>(obj),
        ("", "v1", "Pod") => decode::<k8s_openapi::api::core::v1::Pod>(obj),
        ("", "v1", "PodTemplate") => decode::<k8s_openapi::api::core::v1::PodTemplate>(obj),
        ("", "v1", "ReplicationController") => decode::<k8s_openapi::api::core::v1::ReplicationController>(obj),
        ("", "v1", "ResourceQuota") => decode::<k8s_openapi::api::core::v1::ResourceQuota>(obj),
        ("", "v1", "Secret") => decode::<k8s_openapi::api::core::v1::Secret>(obj),
        ("", "v1", "ServiceAccount") => decode::<k8s_openapi::api::core::v1::ServiceAccount>(obj),
        ("", "v1", "Service") => decode::<k8s_openapi::api::core::v1::Service>(obj),
        ("apiregistration.k8s.io", "v1", "APIService") => {
            decode::<k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService>(obj)
        }
        ("apps", "v1", "ControllerRevision") => decode::<k8s_openapi::api::apps::v1::ControllerRevision>(obj),
        ("apps", "v1", "DaemonSet") => decode::<k8s_openapi::api::apps::v1::DaemonSet>(obj),
        ("apps", "v1", "Deployment") => decode::<k8s_openapi::api::apps::v1::Deployment>(obj),
        ("apps", "v1", "ReplicaSet") => decode::<k8s_openapi::api::apps::v1::ReplicaSet>(obj),
        ("apps", "v1", "StatefulSet") => decode::<k8s_openapi::api::apps::v1::StatefulSet>(obj),
        ("events.k8s.io", "v1", "Event") => decode::<k8s_openapi::api::events::v1::Event>(obj),
        ("authentication.k8s.io", "v1", "SelfSubjectReview") => {
            decode::<k8s_openapi::api::authentication::v1::SelfSubjectReview>(obj)
        }
        ("authentication.k8s.io", "v1", "TokenReview") => {
            decode::<k8s_openapi::api::authentication::v1::TokenReview>(obj)
        }
        ("authorization.k8s.io", "v1", "LocalSubjectAccessReview") => {
            decode::<k8s_openapi::api::authorization::v1::LocalSubjectAccessReview>(obj)
        }
        ("authorization.k8s.io", "v1", "SelfSubjectAccessReview") => {
            decode::<k8s_openapi::api::authorization::v1::SelfSubjectAccessReview>(obj)
        }
        ("authorization.k8s.io", "v1", "SelfSubjectRulesReview") => {
            decode::<k8s_openapi::api::authorization::v1::SelfSubjectRulesReview>(obj)
        }
        ("authorization.k8s.io", "v1", "SubjectAccessReview") => {
            decode::<k8s_openapi::api::authorization::v1::SubjectAccessReview>(obj)
        }
        ("autoscaling", "v2", "HorizontalPodAutoscaler") => {
            decode::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>(obj)
        }
        ("autoscaling", "v1", "HorizontalPodAutoscaler") => {
            decode::<k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler>(obj)
        }
        ("batch", "v1", "CronJob") => decode::<k8s_openapi::api::batch::v1::CronJob>(obj),
        ("batch", "v1", "Job") => decode::<k8s_openapi::api::batch::v1::Job>(obj),
        ("certificates.k8s.io", "v1", "CertificateSigningRequest") => {
            decode::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>(obj)
        }
        ("networking.k8s.io", "v1", "IngressClass") => decode::<k8s_openapi::api::networking::v1::IngressClass>(obj),
        ("networking.k8s.io", "v1", "Ingress") => decode::<k8s_openapi::api::networking::v1::Ingress>(obj),
        ("networking.k8s.io", "v1", "IPAddress") => decode::<k8s_openapi::api::networking::v1::IPAddress>(obj),
        ("networking.k8s.io", "v1", "NetworkPolicy") => decode::<k8s_openapi::api::networking::v1::NetworkPolicy>(obj),
        ("networking.k8s.io", "v1", "ServiceCIDR") => decode::<k8s_openapi::api::networking::v1::ServiceCIDR>(obj),
        ("policy", "v1", "PodDisruptionBudget") => decode::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(obj),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            decode::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(obj)
        }
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => decode::<k8s_openapi::api::rbac::v1::ClusterRole>(obj),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => decode::<k8s_openapi::api::rbac::v1::RoleBinding>(obj),
        ("rbac.authorization.k8s.io", "v1", "Role") => decode::<k8s_openapi::api::rbac::v1::Role>(obj),
        ("storage.k8s.io", "v1", "CSIDriver") => decode::<k8s_openapi::api::storage::v1::CSIDriver>(obj),
        ("storage.k8s.io", "v1", "CSINode") => decode::<k8s_openapi::api::storage::v1::CSINode>(obj),
        ("storage.k8s.io", "v1", "CSIStorageCapacity") => {
            decode::<k8s_openapi::api::storage::v1::CSIStorageCapacity>(obj)
        }
        ("storage.k8s.io", "v1", "StorageClass") => decode::<k8s_openapi::api::storage::v1::StorageClass>(obj),
        ("storage.k8s.io", "v1", "VolumeAttachment") => decode::<k8s_openapi::api::storage::v1::VolumeAttachment>(obj),
        ("storage.k8s.io", "v1", "VolumeAttributesClass") => {
            decode::<k8s_openapi::api::storage::v1::VolumeAttributesClass>(obj)
        }
        ("admissionregistration.k8s.io", "v1", "MutatingAdmissionPolicy") => {
            decode::<k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy>(obj)
        }
        ("admissionregistration.k8s.io", "v1", "MutatingAdmissionPolicyBinding") => {
            decode::<k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicyBinding>(obj)
        }
        ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration") => {
            decode::<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration>(obj)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy") => {
            decode::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>(obj)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding") => {
            decode::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>(obj)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration") => {
            decode::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>(obj)
        }
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            decode::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(obj)
        }
        ("scheduling.k8s.io", "v1", "PriorityClass") => decode::<k8s_openapi::api::scheduling::v1::PriorityClass>(obj),
        ("coordination.k8s.io", "v1", "Lease") => decode::<k8s_openapi::api::coordination::v1::Lease>(obj),
        ("node.k8s.io", "v1", "RuntimeClass") => decode::<k8s_openapi::api::node::v1::RuntimeClass>(obj),
        ("discovery.k8s.io", "v1", "EndpointSlice") => decode::<k8s_openapi::api::discovery::v1::EndpointSlice>(obj),
        ("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema") => {
            decode::<k8s_openapi::api::flowcontrol::v1::FlowSchema>(obj)
        }
        ("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration") => {
            decode::<k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration>(obj)
        }
        ("resource.k8s.io", "v1", "DeviceClass") => decode::<k8s_openapi::api::resource::v1::DeviceClass>(obj),
        ("resource.k8s.io", "v1", "ResourceClaim") => decode::<k8s_openapi::api::resource::v1::ResourceClaim>(obj),
        ("resource.k8s.io", "v1", "ResourceClaimTemplate") => {
            decode::<k8s_openapi::api::resource::v1::ResourceClaimTemplate>(obj)
        }
        ("resource.k8s.io", "v1", "ResourceSlice") => decode::<k8s_openapi::api::resource::v1::ResourceSlice>(obj),
        _ => Ok(Vec::new()),
    }
}
