//! The root CA publisher: every active namespace has a ConfigMap kube-root-ca.crt holding
//! the cluster CA, so pods can verify the API server (upstream's root-ca-cert-publisher).
//! Changed or deleted copies are put back.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::{Clients, per_namespace};

pub const NAME: &str = "kube-root-ca.crt";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

pub async fn run(clients: Clients, ca_pem: String) {
    let c = clients.clone();
    per_namespace::run::<ConfigMap, _, _>("root-ca-cert-publisher", clients, NAME, move |ns| {
        let reader: Api<ConfigMap> = Api::namespaced(c.read.clone(), &ns);
        let api: Api<ConfigMap> = Api::namespaced(c.write.clone(), &ns);
        let data = BTreeMap::from([("ca.crt".to_string(), ca_pem.clone())]);
        async move {
            let annotations = BTreeMap::from([("kubernetes.io/description".to_string(), DESCRIPTION.to_string())]);
            match reader.get_opt(NAME).await? {
                Some(cm) if cm.data.as_ref() == Some(&data) => Ok(()),
                Some(mut cm) => {
                    cm.data = Some(data);
                    cm.metadata.annotations.get_or_insert_default().extend(annotations);
                    per_namespace::ignore_benign(api.replace(NAME, &PostParams::default(), &cm).await.map(|_| ()))
                }
                None => {
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(NAME.into()),
                            annotations: Some(annotations),
                            ..Default::default()
                        },
                        data: Some(data),
                        ..Default::default()
                    };
                    per_namespace::ignore_benign(api.create(&PostParams::default(), &cm).await.map(|_| ()))
                }
            }
        }
    })
    .await
}
