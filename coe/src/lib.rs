//! Inputs to the controller: Kubernetes watchers and the REST northbound.
//!
//! [`rest`] is the RESTCONF northbound that OpenDaylight's COE watcher drives: parsing,
//! validation, durable storage and the translation into [`netvirt::model::Model`].

pub mod rest;
