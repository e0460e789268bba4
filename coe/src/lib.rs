//! Inputs to the controller: Kubernetes watchers and the REST northbound.
//!
//! [`k8s`] watches Kubernetes (Services, EndpointSlices, Nodes, Pods, Namespaces) with kube-rs
//! and translates what it sees into the same model; see docs/kubernetes.md.
//!
//! [`rest`] is the RESTCONF northbound that OpenDaylight's COE watcher drives: parsing,
//! validation, durable storage and the translation into [`netvirt::model::Model`].
//!
//! Shared by both, pure: [`par`] (two pieces of CPU work at once, for bulk writes) and
//! `addresses` (where each address is in a service's endpoints). [`priority`] lowers the
//! REST publisher's scheduling priority (two system calls, no other I/O).

mod addresses;
pub mod k8s;
pub mod par;
pub mod priority;
pub mod rest;
