//! Inputs to the controller: Kubernetes watchers and the REST northbound.
