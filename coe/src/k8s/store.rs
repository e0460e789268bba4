//! The watchers' stores: each kind's objects by key, as [`super::slim`] projections. No I/O
//! of its own; [`super::watch`] feeds it kube's watcher events.
//!
//! It is kube-runtime's reflector store with one difference: it keeps what the translation
//! reads of each object, not the object. The semantics are the reflector's: a list fills a
//! new map, which replaces the old one at once when the list is done (so the last state stays
//! while the API server is away, and a relist never shows a half-filled store); a watch
//! event replaces or removes one object.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::watcher;
use tokio::sync::watch;

use super::keyed::key_of;
use super::slim::ObjKey;

/// A B-tree: a hash table of 30,000 entries has room for 65,536 (3.7 MiB for one kind).
type Map<T> = BTreeMap<ObjKey, Arc<T>>;

/// Reads a store; clones share it.
#[derive(Debug)]
pub(crate) struct Store<T> {
    map: Arc<RwLock<Map<T>>>,
    listed: watch::Receiver<bool>,
}

impl<T> Clone for Store<T> {
    fn clone(&self) -> Self {
        Store {
            map: self.map.clone(),
            listed: self.listed.clone(),
        }
    }
}

/// The store's writer is gone (its watcher stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the watcher of this store stopped")]
pub(crate) struct WriterGone;

impl<T> Store<T> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Map<T>> {
        // A poisoned lock only means a writer panicked between two whole-entry writes.
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The object under `key`.
    pub(crate) fn get(&self, key: &ObjKey) -> Option<Arc<T>> {
        self.read().get(key).cloned()
    }

    /// Every object, in no particular order.
    pub(crate) fn state(&self) -> Vec<Arc<T>> {
        self.read().values().cloned().collect()
    }

    /// Waits for the first list to be done.
    pub(crate) async fn ready(&self) -> Result<(), WriterGone> {
        let mut listed = self.listed.clone();
        listed
            .wait_for(|l| *l)
            .await
            .map(|_| ())
            .map_err(|_| WriterGone)
    }
}

/// What applying an event changed in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Touched {
    /// Nothing yet (a list being read).
    Nothing,
    /// The object under this key.
    Object(ObjKey),
    /// Everything: a list replaced the store.
    Everything,
}

/// Applies one kind's watcher events to its store.
#[derive(Debug)]
pub(crate) struct Writer<T> {
    map: Arc<RwLock<Map<T>>>,
    /// The list being read, until it is done.
    next: Option<Map<T>>,
    listed: watch::Sender<bool>,
}

impl<T> Writer<T> {
    /// A new, empty store and its writer.
    pub(crate) fn new() -> (Store<T>, Self) {
        let map = Arc::new(RwLock::new(BTreeMap::new()));
        let (listed, rx) = watch::channel(false);
        (
            Store {
                map: map.clone(),
                listed: rx,
            },
            Writer {
                map,
                next: None,
                listed,
            },
        )
    }

    /// Applies `event`, keeping the projection of its object; says what it changed.
    pub(crate) fn apply<K>(&mut self, event: watcher::Event<K>) -> Touched
    where
        K: Resource,
        T: From<K>,
    {
        match event {
            watcher::Event::Init => {
                self.next = Some(BTreeMap::new());
                Touched::Nothing
            }
            watcher::Event::InitApply(o) => {
                let key = key_of(o.meta());
                self.next
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key, Arc::new(T::from(o)));
                Touched::Nothing
            }
            watcher::Event::InitDone => {
                let next = self.next.take().unwrap_or_default();
                let old = std::mem::replace(&mut *self.write(), next);
                drop(old); // outside the lock
                self.listed.send_replace(true);
                Touched::Everything
            }
            watcher::Event::Apply(o) => {
                let key = key_of(o.meta());
                let value = Arc::new(T::from(o));
                let old = self.write().insert(key.clone(), value);
                drop(old); // outside the lock
                Touched::Object(key)
            }
            watcher::Event::Delete(o) => {
                let key = key_of(o.meta());
                let old = self.write().remove(&key);
                drop(old);
                Touched::Object(key)
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Map<T>> {
        self.map.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::k8s::slim;
    use k8s_openapi::api::core::v1::Namespace;

    type Event = watcher::Event<Namespace>;

    fn ns(name: &str) -> Namespace {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap()
    }

    fn names(store: &Store<slim::Namespace>) -> Vec<String> {
        let mut v: Vec<String> = store
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        v.sort();
        v
    }

    /// A list replaces the store only when it is done; watch events change one object.
    #[tokio::test]
    async fn a_list_swaps_in_whole_and_events_change_one_object() {
        let (store, mut writer) = Writer::<slim::Namespace>::new();
        assert_eq!(writer.apply(Event::Init), Touched::Nothing);
        assert_eq!(writer.apply(Event::InitApply(ns("a"))), Touched::Nothing);
        assert!(names(&store).is_empty(), "half a list is not shown");
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(20), store.ready())
                .await
                .is_err(),
            "not ready before the list is done"
        );
        writer.apply(Event::InitApply(ns("b")));
        assert_eq!(writer.apply(Event::InitDone), Touched::Everything);
        store.ready().await.unwrap();
        assert_eq!(names(&store), ["a", "b"]);
        let c = (String::new(), "c".to_string());
        assert_eq!(writer.apply(Event::Apply(ns("c"))), Touched::Object(c));
        writer.apply(Event::Delete(ns("a")));
        assert_eq!(names(&store), ["b", "c"]);
        assert!(store.get(&(String::new(), "b".into())).is_some());
        // A relist: the old state stays until the new list is done.
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(ns("d")));
        assert_eq!(names(&store), ["b", "c"]);
        writer.apply(Event::InitDone);
        assert_eq!(names(&store), ["d"]);
        drop(writer);
        store.ready().await.unwrap(); // listed once stays listed
    }

    #[tokio::test]
    async fn a_store_whose_watcher_stopped_before_its_list_says_so() {
        let (store, writer) = Writer::<slim::Namespace>::new();
        drop(writer);
        assert_eq!(store.ready().await, Err(WriterGone));
    }
}
