//! The PersistentVolume binder (upstream's persistentvolume-binder-controller, identity
//! persistent-volume-binder): static binding of claims to volumes (pre-bound volumes,
//! spec.volumeName, class, access modes, capacity, selector), the phases
//! Available/Bound/Released/Failed/Lost, the bind-completed and bound-by-controller
//! annotations, reclaim policies (Retain keeps a Released volume; Delete and Recycle have
//! no in-tree plugin here, so the volume fails with upstream's event unless an external
//! provisioner owns it), claims of WaitForFirstConsumer classes left Pending, and the
//! default StorageClass given to claims without one, also retroactively.

pub mod matching;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::{Context, Error};
use matching::{best_match, claim_class, default_class, prebound_to};

pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
pub const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
const NAME: &str = "persistentvolume-binder";

struct State {
    write: kube::Client,
    volumes: Store<PersistentVolume>,
    claims: Store<PersistentVolumeClaim>,
    classes: Store<StorageClass>,
    recorder: Recorder,
}

impl State {
    async fn event(&self, object: &ObjectReference, type_: EventType, reason: &str, note: String) {
        let event = Event { type_, reason: reason.into(), note: Some(note), action: reason.into(), secondary: None };
        if let Err(error) = self.recorder.publish(&event, object).await {
            tracing::debug!(controller = NAME, %error, reason, "recording event");
        }
    }
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("persistent-volume-binder");
    let i = &ctx.informers;
    let (volumes, claims, classes) =
        (i.get::<PersistentVolume>(), i.get::<PersistentVolumeClaim>(), i.get::<StorageClass>());
    futures::join!(volumes.ready(), claims.ready(), classes.ready());
    let state = Arc::new(State {
        write: clients.write.clone(),
        volumes: volumes.store(),
        claims: claims.store(),
        classes: classes.store(),
        recorder: Recorder::new(
            clients.write,
            Reporter { controller: "persistentvolume-controller".into(), instance: None },
        ),
    });
    let claim_store = claims.store();
    let unbound_claims = move || {
        claim_store
            .state()
            .iter()
            .filter(|c| c.spec.as_ref().and_then(|s| s.volume_name.as_deref()).is_none_or(str::is_empty))
            .map(|c| ObjectRef::from_obj(c.as_ref()))
            .collect::<Vec<_>>()
    };
    let unbound_for_classes = unbound_claims.clone();
    // Claims are bound one at a time, so two never race for one volume.
    let claim_loop = Controller::for_shared_stream(claims.subscribe(), claims.store())
        .with_config(Config::default().concurrency(1))
        .watches_shared_stream(volumes.subscribe(), move |pv: Arc<PersistentVolume>| {
            // A volume's change concerns the claim it names, or any waiting claim if free.
            match pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
                Some(r) => {
                    vec![ObjectRef::new(r.name.as_deref().unwrap_or("")).within(r.namespace.as_deref().unwrap_or(""))]
                }
                None => unbound_claims(),
            }
        })
        .watches_shared_stream(classes.subscribe(), move |_: Arc<StorageClass>| unbound_for_classes())
        .run(
            |claim, state: Arc<State>| async move {
                let result = sync_claim(&claim, &state).await;
                crate::metrics::record(NAME, result.is_ok());
                result
            },
            |claim, error, _| {
                tracing::warn!(controller = NAME, claim = %claim.name_any(), %error, "claim sync failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            state.clone(),
        )
        .for_each(|_| futures::future::ready(()));
    let volume_store = volumes.store();
    let volume_loop = Controller::for_shared_stream(volumes.subscribe(), volumes.store())
        .with_config(Config::default().concurrency(1))
        .watches_shared_stream(claims.subscribe(), move |claim: Arc<PersistentVolumeClaim>| {
            volume_store
                .state()
                .iter()
                .filter(|pv| {
                    let r = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
                    r.is_some_and(|r| r.name.as_deref() == Some(&claim.name_any()) && r.namespace == claim.namespace())
                })
                .map(|pv| ObjectRef::from_obj(pv.as_ref()))
                .collect::<Vec<_>>()
        })
        .run(
            |pv, state: Arc<State>| async move {
                let result = sync_volume(&pv, &state).await;
                crate::metrics::record(NAME, result.is_ok());
                result
            },
            |pv, error, _| {
                tracing::warn!(controller = NAME, volume = %pv.name_any(), %error, "volume sync failed; retrying");
                Action::requeue(Duration::from_secs(1))
            },
            state,
        )
        .for_each(|_| futures::future::ready(()));
    futures::join!(claim_loop, volume_loop);
}

fn annotated(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, key: &str) -> bool {
    meta.annotations.as_ref().is_some_and(|a| a.contains_key(key))
}

fn phase_of_claim(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim.status.as_ref()?.phase.as_deref()
}

async fn set_claim_phase(
    state: &State,
    claim: &PersistentVolumeClaim,
    phase: &str,
    pv: Option<&PersistentVolume>,
) -> Result<(), Error> {
    let mut updated = claim.clone();
    let status = updated.status.get_or_insert_with(Default::default);
    let (capacity, modes) = match pv {
        Some(pv) => {
            (pv.spec.as_ref().and_then(|s| s.capacity.clone()), pv.spec.as_ref().and_then(|s| s.access_modes.clone()))
        }
        None => (None, None),
    };
    if status.phase.as_deref() == Some(phase)
        && (pv.is_none() || (status.capacity == capacity && status.access_modes == modes))
    {
        return Ok(());
    }
    status.phase = Some(phase.into());
    if pv.is_some() {
        status.capacity = capacity;
        status.access_modes = modes;
    }
    let api: Api<PersistentVolumeClaim> = Api::namespaced(state.write.clone(), &claim.namespace().unwrap_or_default());
    api.replace_status(&claim.name_any(), &PostParams::default(), &updated).await?;
    Ok(())
}

async fn set_volume_phase(
    state: &State,
    pv: &PersistentVolume,
    phase: &str,
    message: Option<String>,
) -> Result<PersistentVolume, Error> {
    if pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase) {
        return Ok(pv.clone());
    }
    let mut updated = pv.clone();
    let status = updated.status.get_or_insert_with(Default::default);
    status.phase = Some(phase.into());
    status.message = message;
    status.last_phase_transition_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
    let api: Api<PersistentVolume> = Api::all(state.write.clone());
    Ok(api.replace_status(&pv.name_any(), &PostParams::default(), &updated).await?)
}

async fn sync_claim(claim: &PersistentVolumeClaim, state: &State) -> Result<Action, Error> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = claim.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(state.write.clone(), &namespace);
    let reference = claim.object_ref(&());
    let volume_name = claim.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|v| !v.is_empty());

    if annotated(&claim.metadata, BIND_COMPLETED) {
        // Bound: the volume must still be there and ours.
        let pv = volume_name.as_ref().and_then(|n| state.volumes.get(&ObjectRef::new(n)));
        let ours = pv.as_ref().is_some_and(|pv| {
            let r = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            r.is_some_and(|r| r.uid.as_deref() == claim.metadata.uid.as_deref())
        });
        match pv {
            None if phase_of_claim(claim) != Some("Lost") => {
                set_claim_phase(state, claim, "Lost", None).await?;
                let note =
                    "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!".to_string();
                state.event(&reference, EventType::Warning, "ClaimLost", note).await;
            }
            Some(pv) if ours => set_claim_phase(state, claim, "Bound", Some(&pv)).await?,
            Some(pv) if pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_none() => {
                // The volume lost its claimRef (a half-done bind): finish it again.
                bind(state, claim, &pv).await?;
            }
            _ => {}
        }
        return Ok(Action::await_change());
    }

    // Retroactive default StorageClass: a pending claim with no class gets the default.
    if claim.spec.as_ref().is_some_and(|s| s.storage_class_name.is_none())
        && volume_name.is_none()
        && let Some(class) = default_class(&state.classes.state())
    {
        let mut updated = claim.clone();
        updated.spec.get_or_insert_with(Default::default).storage_class_name = Some(class.name_any());
        claims.replace(&claim.name_any(), &PostParams::default(), &updated).await?;
        return Ok(Action::await_change());
    }

    if let Some(name) = volume_name {
        // Pre-bound by the user to a named volume.
        let Some(pv) = state.volumes.get(&ObjectRef::new(&name)) else {
            set_claim_phase(state, claim, "Pending", None).await?;
            return Ok(Action::requeue(Duration::from_secs(15)));
        };
        let free = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_none();
        if free || prebound_to(&pv, claim) {
            bind(state, claim, &pv).await?;
        } else {
            set_claim_phase(state, claim, "Pending", None).await?;
            let note = format!("volume \"{name}\" already bound to a different claim.");
            state.event(&reference, EventType::Warning, "FailedBinding", note).await;
        }
        return Ok(Action::await_change());
    }

    let class = state.classes.get(&ObjectRef::new(claim_class(claim)));
    let volumes = state.volumes.state();
    if let Some(pv) = best_match(&volumes, claim) {
        bind(state, claim, &pv).await?;
        return Ok(Action::await_change());
    }
    set_claim_phase(state, claim, "Pending", None).await?;
    let wait_for_consumer =
        class.as_ref().and_then(|c| c.volume_binding_mode.as_deref()) == Some("WaitForFirstConsumer");
    if wait_for_consumer && !annotated(&claim.metadata, SELECTED_NODE) {
        let note = "waiting for first consumer to be created before binding".to_string();
        state.event(&reference, EventType::Normal, "WaitForFirstConsumer", note).await;
        return Ok(Action::await_change());
    }
    match class.as_ref().map(|c| c.provisioner.as_str()).filter(|p| *p != "kubernetes.io/no-provisioner") {
        Some(provisioner) => {
            if !annotated(&claim.metadata, STORAGE_PROVISIONER) {
                let mut updated = claim.clone();
                updated.annotations_mut().insert(STORAGE_PROVISIONER.into(), provisioner.into());
                updated
                    .annotations_mut()
                    .insert("volume.beta.kubernetes.io/storage-provisioner".into(), provisioner.into());
                claims.replace(&claim.name_any(), &PostParams::default(), &updated).await?;
            }
            let note = format!(
                "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
            );
            state.event(&reference, EventType::Normal, "ExternalProvisioning", note).await;
        }
        None => {
            let note = match (&class, claim_class(claim)) {
                (Some(_), _) => "no persistent volumes available for this claim".to_string(),
                (None, "") => "no persistent volumes available for this claim and no storage class is set".to_string(),
                (None, name) => format!("storageclass.storage.k8s.io \"{name}\" not found"),
            };
            state.event(&reference, EventType::Normal, "FailedBinding", note).await;
        }
    }
    Ok(Action::await_change())
}

/// Binds in upstream's order: the volume's claimRef, its phase, then the claim's
/// volumeName and annotations, then its phase — each step safe to repeat.
async fn bind(state: &State, claim: &PersistentVolumeClaim, pv: &PersistentVolume) -> Result<(), Error> {
    let volumes: Api<PersistentVolume> = Api::all(state.write.clone());
    let namespace = claim.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(state.write.clone(), &namespace);
    let mut pv = pv.clone();
    let bound_to_claim = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_some_and(|r| {
        r.uid.as_deref() == claim.metadata.uid.as_deref() && r.name.as_deref() == Some(&claim.name_any())
    });
    if !bound_to_claim {
        let by_controller = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_none();
        let spec = pv.spec.get_or_insert_with(Default::default);
        spec.claim_ref = Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            namespace: Some(namespace.clone()),
            name: Some(claim.name_any()),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.resource_version(),
            ..Default::default()
        });
        if by_controller {
            pv.annotations_mut().insert(BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        pv = volumes.replace(&pv.name_any(), &PostParams::default(), &pv).await?;
    }
    let pv = set_volume_phase(state, &pv, "Bound", None).await?;
    let mut updated = claim.clone();
    let spec = updated.spec.get_or_insert_with(Default::default);
    let set_by_us = spec.volume_name.as_deref().is_none_or(str::is_empty);
    if set_by_us || !annotated(&claim.metadata, BIND_COMPLETED) {
        spec.volume_name = Some(pv.name_any());
        updated.annotations_mut().insert(BIND_COMPLETED.into(), "yes".into());
        if set_by_us {
            updated.annotations_mut().insert(BOUND_BY_CONTROLLER.into(), "yes".into());
        }
        updated = claims.replace(&claim.name_any(), &PostParams::default(), &updated).await?;
    }
    set_claim_phase(state, &updated, "Bound", Some(&pv)).await?;
    tracing::info!(controller = NAME, claim = %claim.name_any(), volume = %pv.name_any(), "bound");
    Ok(())
}

async fn sync_volume(pv: &PersistentVolume, state: &State) -> Result<Action, Error> {
    if pv.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone());
    let Some(r) = claim_ref else {
        set_volume_phase(state, pv, "Available", None).await?;
        return Ok(Action::await_change());
    };
    let claim =
        state.claims.get(&ObjectRef::new(r.name.as_deref().unwrap_or("")).within(r.namespace.as_deref().unwrap_or("")));
    let uid = r.uid.clone().filter(|u| !u.is_empty());
    match (uid, claim) {
        // Pre-bound to a claim by name only: available for it.
        (None, _) => {
            set_volume_phase(state, pv, "Available", None).await?;
        }
        (Some(uid), Some(claim)) if claim.metadata.uid.as_deref() == Some(uid.as_str()) => {
            // The claim's sync finishes the bind; the volume only confirms it.
            if claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()) == Some(pv.name_any().as_str()) {
                set_volume_phase(state, pv, "Bound", None).await?;
            }
        }
        // The claim is gone: release and reclaim.
        (Some(_), _) => reclaim(state, pv).await?,
    }
    Ok(Action::await_change())
}

async fn reclaim(state: &State, pv: &PersistentVolume) -> Result<(), Error> {
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Failed")) {
        return Ok(());
    }
    let pv = set_volume_phase(state, pv, "Released", None).await?;
    let reference = pv.object_ref(&());
    let policy = pv.spec.as_ref().and_then(|s| s.persistent_volume_reclaim_policy.as_deref()).unwrap_or("Retain");
    match policy {
        "Retain" => {}
        "Delete" if annotated(&pv.metadata, PROVISIONED_BY) => {
            // An external provisioner deletes what it made.
        }
        "Delete" => {
            let message = format!(
                "error getting deleter volume plugin for volume \"{}\": no deletable volume plugin matched",
                pv.name_any()
            );
            set_volume_phase(state, &pv, "Failed", Some(message.clone())).await?;
            state.event(&reference, EventType::Warning, "VolumeFailedDelete", message).await;
        }
        _ => {
            let message = "No recycler plugin found for the volume!".to_string();
            set_volume_phase(state, &pv, "Failed", Some(message.clone())).await?;
            state.event(&reference, EventType::Warning, "VolumeFailedRecycle", message).await;
        }
    }
    Ok(())
}
