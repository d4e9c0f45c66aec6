//! Lists and watches over HTTPS with kube-rs: selectors, paging, resource versions,
//! watch events, bookmarks, watch-list, expired revisions.

use std::time::Duration;

use crate::common::TestServer;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": {"k": name}})).unwrap()
}

async fn next<T>(s: &mut (impl futures::Stream<Item = Result<T, kube::Error>> + Unpin)) -> T {
    tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("an event in time")
        .expect("stream open")
        .expect("no error")
}

#[tokio::test]
async fn selectors_paging_and_all_namespaces() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap())
        .await
        .unwrap();
    let default: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "other");
    for i in 0..7 {
        let tier = if i % 2 == 0 { "front" } else { "back" };
        default
            .create(&PostParams::default(), &cm(&format!("cm-{i}"), json!({"app": "web", "tier": tier})))
            .await
            .unwrap();
    }
    other.create(&PostParams::default(), &cm("elsewhere", json!({"app": "db"}))).await.unwrap();

    let names =
        |l: kube::core::ObjectList<ConfigMap>| l.items.into_iter().filter_map(|c| c.metadata.name).collect::<Vec<_>>();
    let front = default.list(&ListParams::default().labels("tier=front")).await.unwrap();
    assert_eq!(names(front), vec!["cm-0", "cm-2", "cm-4", "cm-6"]);
    let set = default.list(&ListParams::default().labels("tier in (back),app")).await.unwrap();
    assert_eq!(names(set), vec!["cm-1", "cm-3", "cm-5"]);
    let by_name = default.list(&ListParams::default().fields("metadata.name=cm-3")).await.unwrap();
    assert_eq!(names(by_name), vec!["cm-3"]);
    let all: Api<ConfigMap> = Api::all(client.clone());
    let everywhere = all.list(&ListParams::default().labels("app")).await.unwrap();
    assert_eq!(everywhere.items.len(), 8, "all namespaces");
    let in_other = all.list(&ListParams::default().fields("metadata.namespace=other")).await.unwrap();
    assert_eq!(names(in_other), vec!["elsewhere"]);
    match default.list(&ListParams::default().fields("spec.nope=x")).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.message.as_str()), (400, "field label not supported: spec.nope"))
        }
        other => panic!("expected 400, got {other:?}"),
    }
    match default.list(&ListParams::default().labels("in valid==")).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 400),
        other => panic!("expected 400, got {other:?}"),
    }

    // Paging: pages of 3 at one revision, even while things change in between.
    let first = default.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(first.items.len(), 3);
    assert_eq!(first.metadata.remaining_item_count, Some(4));
    let token = first.metadata.continue_.clone().expect("a continue token");
    default.delete("cm-5", &DeleteParams::default()).await.unwrap();
    let second = default.list(&ListParams::default().limit(3).continue_token(&token)).await.unwrap();
    assert_eq!(second.metadata.resource_version, first.metadata.resource_version);
    let third = default
        .list(&ListParams::default().limit(3).continue_token(second.metadata.continue_.as_ref().unwrap()))
        .await
        .unwrap();
    assert!(third.metadata.continue_.is_none());
    let mut seen = names(first);
    seen.extend(names(second));
    seen.extend(names(third));
    assert_eq!(seen, (0..7).map(|i| format!("cm-{i}")).collect::<Vec<_>>(), "the snapshot, deleted cm-5 included");

    // Paging with a selector fills pages with matches only.
    let page = default.list(&ListParams::default().labels("tier=back").limit(2)).await.unwrap();
    assert_eq!(names(page.clone()), vec!["cm-1", "cm-3"]);
    assert!(page.metadata.continue_.is_some());

    // resourceVersion=0 is served from the watch cache; Exact needs a revision.
    let cached = default.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(cached.items.len(), 6);
    let bad_token = default.list(&ListParams::default().limit(1).continue_token("garbage")).await;
    assert!(matches!(bad_token, Err(kube::Error::Api(e)) if e.code == 400));
}

#[tokio::test]
async fn watch_events_in_order_with_selector_transitions() {
    let srv = TestServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let start = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();

    let mut all = api.watch(&WatchParams::default(), &start).await.unwrap().boxed();
    let mut web = api.watch(&WatchParams::default().labels("app=web"), &start).await.unwrap().boxed();

    api.create(&PostParams::default(), &cm("w", json!({"app": "web"}))).await.unwrap();
    api.patch("w", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "2"}}))).await.unwrap();
    api.patch("w", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})))
        .await
        .unwrap();
    api.delete("w", &DeleteParams::default()).await.unwrap();

    let kinds = |e: &WatchEvent<ConfigMap>| match e {
        WatchEvent::Added(o) => ("ADDED", o.metadata.resource_version.clone()),
        WatchEvent::Modified(o) => ("MODIFIED", o.metadata.resource_version.clone()),
        WatchEvent::Deleted(o) => ("DELETED", o.metadata.resource_version.clone()),
        WatchEvent::Bookmark(_) => ("BOOKMARK", None),
        WatchEvent::Error(_) => ("ERROR", None),
    };
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(kinds(&next(&mut all).await));
    }
    assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), vec!["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
    let revs: Vec<i64> = seen.iter().map(|s| s.1.as_ref().unwrap().parse().unwrap()).collect();
    assert!(revs.windows(2).all(|w| w[0] < w[1]), "revisions increase: {revs:?}");

    // The selector watcher sees the object leave its selection as a delete.
    let web_kinds: Vec<&str> =
        [next(&mut web).await, next(&mut web).await, next(&mut web).await].iter().map(|e| kinds(e).0).collect();
    assert_eq!(web_kinds, vec!["ADDED", "MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn watch_from_too_old_revision_is_gone_and_watch_list_works() {
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("pre", json!({}))).await.unwrap();

    // The watch cache starts at the current revision; revision 1 is older than it.
    let mut old = api.watch(&WatchParams::default(), "1").await.unwrap().boxed();
    match next(&mut old).await {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }

    // Watch-list: initial ADDED events, then the bookmark marking their end.
    let wp = WatchParams::default().initial_events();
    let mut wl = api.watch(&wp, "").await.unwrap().boxed();
    match next(&mut wl).await {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("pre")),
        other => panic!("expected ADDED, got {other:?}"),
    }
    match next(&mut wl).await {
        WatchEvent::Bookmark(b) => {
            assert_eq!(b.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str), Some("true"))
        }
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
    api.create(&PostParams::default(), &cm("post", json!({}))).await.unwrap();
    match next(&mut wl).await {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("post")),
        other => panic!("expected ADDED, got {other:?}"),
    }

    // kube-runtime's watcher (list + watch, as controllers use it) converges.
    let stream = watcher(api.clone(), watcher::Config::default()).applied_objects();
    futures::pin_mut!(stream);
    let mut names = Vec::new();
    while names.len() < 2 {
        let o = tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.unwrap().unwrap().unwrap();
        names.push(o.metadata.name.unwrap());
    }
    names.sort();
    assert_eq!(names, vec!["post", "pre"]);
}

#[tokio::test]
async fn events_expire_after_the_event_ttl() {
    // The test server keeps Events for 2 s (upstream's --event-ttl, default 1 h).
    let srv = TestServer::start().await;
    let client = srv.client().await;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let ev: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "ev1"},
        "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": "default"},
        "reason": "Testing",
        "message": "expires",
        "type": "Normal",
    }))
    .unwrap();
    events.create(&PostParams::default(), &ev).await.unwrap();
    let by_reason =
        events.list(&ListParams::default().fields("reason=Testing,involvedObject.kind=ConfigMap")).await.unwrap();
    assert_eq!(by_reason.items.len(), 1, "event field selectors");
    // Other kinds do not expire.
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.create(&PostParams::default(), &cm("stays", json!({}))).await.unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while events.get_opt("ev1").await.unwrap().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the event outlived its TTL by far");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(cms.get_opt("stays").await.unwrap().is_some());
}

#[tokio::test]
async fn metadata_only_get_list_and_watch() {
    let srv = TestServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    api.create(&PostParams::default(), &cm("meta-a", json!({"app": "x"}))).await.unwrap();
    // What kube-rs's metadata API (and client-go's metadata informers) ask for.
    let one = api.get_metadata("meta-a").await.unwrap();
    assert_eq!(one.types.as_ref().map(|t| t.kind.as_str()), Some("PartialObjectMetadata"));
    assert_eq!(one.metadata.labels.unwrap()["app"], "x");
    let list = api.list_metadata(&ListParams::default().labels("app=x")).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("meta-a"));
    assert!(list.metadata.resource_version.is_some());

    let rv = list.metadata.resource_version.unwrap();
    let mut events = api.watch_metadata(&WatchParams::default().timeout(10), &rv).await.unwrap().boxed();
    api.create(&PostParams::default(), &cm("meta-b", json!({}))).await.unwrap();
    match next(&mut events).await {
        WatchEvent::Added(o) => {
            assert_eq!(o.metadata.name.as_deref(), Some("meta-b"));
            assert_eq!(o.types.map(|t| t.kind), Some("PartialObjectMetadata".to_string()));
        }
        other => panic!("expected ADDED, got {other:?}"),
    }
}
