//! The OpenAPI 3 description of the northbound, served at [`super::server::OPENAPI_PATH`]
//! and kept in `docs/openapi.json` (a test checks the two are the same; run the tests with
//! `SVCFLOW_REGEN_OPENAPI=1` to rewrite the file after a change).

use serde_json::{Map, Value, json};

use super::types::{DATASTORE_PATH, Kind};

/// The document.
pub fn document() -> Value {
    let mut paths = Map::new();
    paths.insert(DATASTORE_PATH.into(), datastore_path());
    for kind in Kind::ALL {
        paths.insert(kind.container_path(), container_path(kind));
        paths.insert(kind.item_path_template(), item_path(kind));
    }
    paths.insert(
        "/restconf/operational/service:service-information".into(),
        json!({ "get": {
            "summary": "What is installed for each service: groups, buckets, flows and counters",
            "tags": ["operational"],
            "responses": {
                "200": { "description": "Every service", "content": json_content(json!({
                    "type": "object",
                    "properties": { "service:service-information": { "type": "object",
                        "properties": {
                            "services": { "type": "array", "items": schema_ref("ServiceState") },
                            "unreported-nodes": { "type": "array", "items": schema_ref("Unreported") },
                        } } }
                })) },
                "401": response_ref("Unauthorized"),
                "503": response_ref("Unavailable"),
            }
        }}),
    );
    paths.insert(
        "/restconf/operational/service:service-information/services/{uid}".into(),
        json!({ "get": {
            "summary": "What is installed for one service",
            "tags": ["operational"],
            "parameters": [ { "$ref": "#/components/parameters/uid" } ],
            "responses": {
                "200": { "description": "The service", "content": json_content(json!({
                    "type": "object",
                    "properties": {
                        "service:services": { "type": "array", "items": schema_ref("ServiceState") },
                        "unreported-nodes": { "type": "array", "items": schema_ref("Unreported") },
                    }
                })) },
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "503": response_ref("Unavailable"),
            }
        }}),
    );
    let plan = |summary: &str| {
        json!({
            "summary": summary,
            "tags": ["operational"],
            "responses": {
                "200": { "description": "The plans, and the nodes that cannot be planned here", "content": json_content(json!({
                    "type": "object",
                    "properties": { "svcflow:plan": { "type": "object", "properties": {
                        "nodes": { "type": "array", "items": schema_ref("NodePlan") },
                        "unreported-nodes": { "type": "array", "items": schema_ref("Unreported") },
                    } } }
                })) },
                "401": response_ref("Unauthorized"),
                "503": response_ref("Unavailable"),
            }
        })
    };
    paths.insert(
        "/restconf/operational/svcflow:plan".into(),
        json!({ "get": plan("Dry run: what svcflow would change on each switch now, read from the live switches; nothing is changed") }),
    );
    let mut one = plan("Dry run for one node");
    one["parameters"] = json!([ { "name": "node", "in": "path", "required": true, "schema": { "type": "string" } } ]);
    one["responses"]["404"] = response_ref("NotFound");
    paths.insert(
        "/restconf/operational/svcflow:plan/{node}".into(),
        json!({ "get": one }),
    );
    let nodes = |summary: &str, description: &str| {
        json!({
            "summary": summary,
            "tags": ["operational"],
            "responses": {
                "200": { "description": description, "content": json_content(json!({
                    "type": "object",
                    "properties": { "svcflow:nodes": { "type": "object", "properties": {
                        "nodes": { "type": "array", "items": schema_ref("NodeState") },
                    } } }
                })) },
                "401": response_ref("Unauthorized"),
                "503": response_ref("Unavailable"),
            }
        })
    };
    paths.insert(
        "/restconf/operational/svcflow:nodes".into(),
        json!({ "get": nodes("Every node of the model: its switch, this replica's OpenFlow role on it, flows and groups, and its last syncs", "Every node") }),
    );
    let mut one = nodes("One node", "The node, alone in the list");
    one["parameters"] = json!([ { "name": "node", "in": "path", "required": true, "schema": { "type": "string" } } ]);
    one["responses"]["404"] = response_ref("NotFound");
    paths.insert(
        "/restconf/operational/svcflow:nodes/{node}".into(),
        json!({ "get": one }),
    );
    paths.insert(
        "/restconf/operations/svcflow:trace".into(),
        json!({ "post": {
            "summary": "Live packet trace: inject a tagged probe into a node's switch and report the path it took (classifier, service, bucket, NAT, output, drop or refusal) in ovs-ofctl terms",
            "tags": ["operational"],
            "requestBody": { "required": true, "content": json_content(json!({
                "type": "object", "required": ["input"],
                "properties": { "input": schema_ref("TraceRequest") }
            })) },
            "responses": {
                "200": { "description": "The path", "content": json_content(json!({
                    "type": "object",
                    "properties": { "svcflow:output": schema_ref("TraceReport") }
                })) },
                "400": response_ref("BadRequest"),
                "401": response_ref("Unauthorized"),
                "404": response_ref("NotFound"),
                "503": response_ref("Unavailable"),
            }
        }}),
    );
    paths.insert(
        "/".into(),
        json!({ "get": {
            "summary": "The status page: nodes, services and recent syncs as read-only HTML (no script; reloads every 5 s)",
            "tags": ["operational"],
            "responses": { "200": { "description": "HTML page", "content": { "text/html": {} } },
                           "401": response_ref("Unauthorized") }
        }}),
    );
    paths.insert(
        "/openapi.json".into(),
        json!({ "get": {
            "summary": "This document",
            "tags": ["meta"],
            "responses": { "200": { "description": "OpenAPI 3 document", "content": { "application/json": {} } },
                           "401": response_ref("Unauthorized") }
        }}),
    );
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "svcflow REST northbound",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "OpenDaylight COE's RESTCONF models (service, pod, k8s-node), as the COE watcher drives them. \
                Member names may carry a module prefix (`service:uid`) or none; unknown members such as `cluster-id` are ignored. \
                Every request is atomic and durable when acknowledged. See docs/rest.md."
        },
        "servers": [ { "url": "http://127.0.0.1:8181" } ],
        "security": [ { "basic": [] }, { "bearer": [] } ],
        "paths": paths,
        "components": components(),
    })
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn response_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/responses/{name}") })
}

fn json_content(schema: Value) -> Value {
    json!({ "application/json": { "schema": schema } })
}

fn schema_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Service => "Service",
        Kind::Endpoints => "Endpoints",
        Kind::Pod => "Pod",
        Kind::Node => "K8sNode",
    }
}

fn container_schema(kind: Kind) -> Value {
    json!({
        "type": "object",
        "description": format!("Members may also be written `{}` and `{}`.", kind.container(), kind.list()),
        "properties": { kind.qualified_container(): { "type": "object", "properties": {
            kind.list(): { "type": "array", "items": schema_ref(schema_name(kind)) } } } }
    })
}

fn list_schema(kind: Kind) -> Value {
    json!({
        "type": "object",
        "description": format!("The list holding exactly this item. `{}` is accepted too.", kind.list()),
        "properties": { kind.qualified_list(): { "type": "array", "minItems": 1, "maxItems": 1,
            "items": schema_ref(schema_name(kind)) } }
    })
}

fn container_path(kind: Kind) -> Value {
    let tag = kind.qualified_container();
    let body = json!({ "required": true, "content": json_content(container_schema(kind)) });
    json!({
        "get": { "summary": format!("All {}", kind.list()), "tags": [tag],
            "responses": { "200": { "description": "The container", "content": json_content(container_schema(kind)) },
                           "401": response_ref("Unauthorized") } },
        "put": { "summary": format!("Replace all {} (atomic)", kind.list()), "tags": [tag], "requestBody": body,
            "responses": { "200": { "description": "Stored" }, "400": response_ref("BadRequest"),
                           "401": response_ref("Unauthorized"), "405": response_ref("WritesRefused"), "415": response_ref("BadMediaType") } },
        "post": { "summary": format!("Create {} (atomic; none may exist)", kind.list()), "tags": [tag], "requestBody": body,
            "responses": { "201": { "description": "Created" }, "400": response_ref("BadRequest"),
                           "401": response_ref("Unauthorized"), "405": response_ref("WritesRefused"), "409": response_ref("Conflict"),
                           "415": response_ref("BadMediaType") } },
        "delete": { "summary": format!("Delete all {}", kind.list()), "tags": [tag],
            "responses": { "200": { "description": "Deleted" }, "401": response_ref("Unauthorized"), "405": response_ref("WritesRefused") } },
    })
}

fn datastore_schema() -> Value {
    let properties: Map<String, Value> = Kind::ALL
        .into_iter()
        .map(|kind| {
            (
                kind.qualified_container(),
                json!({ "type": "object", "properties": {
                    kind.list(): { "type": "array", "items": schema_ref(schema_name(kind)) } } }),
            )
        })
        .collect();
    let required: Vec<String> = Kind::ALL.iter().map(|k| k.qualified_container()).collect();
    json!({
        "type": "object",
        "description": "Every container, as GET on each answers it. A PUT must give all four \
            (an empty list empties one) and nothing else; members may also be written without \
            their module prefix.",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn datastore_path() -> Value {
    let tag = "datastore";
    json!({
        "get": { "summary": "Every container at once", "tags": [tag],
            "responses": { "200": { "description": "The whole config datastore", "content": json_content(datastore_schema()) },
                           "401": response_ref("Unauthorized") } },
        "put": { "summary": "Replace every container as one write (atomic: one check, one log record, one revision)",
            "tags": [tag],
            "requestBody": { "required": true, "content": json_content(datastore_schema()) },
            "responses": { "200": { "description": "Stored" }, "400": response_ref("BadRequest"),
                           "401": response_ref("Unauthorized"), "405": response_ref("WritesRefused"), "415": response_ref("BadMediaType") } },
    })
}

fn item_path(kind: Kind) -> Value {
    let tag = kind.qualified_container();
    let body = json!({ "required": true, "content": json_content(list_schema(kind)) });
    json!({
        "parameters": [ { "$ref": "#/components/parameters/uid" } ],
        "get": { "summary": "One item", "tags": [tag],
            "responses": { "200": { "description": "The item", "content": json_content(list_schema(kind)) },
                           "401": response_ref("Unauthorized"), "404": response_ref("NotFound") } },
        "put": { "summary": "Create or replace the item (200 either way, as the COE watcher expects)", "tags": [tag],
            "requestBody": body,
            "responses": { "200": { "description": "Stored" }, "400": response_ref("BadRequest"),
                           "401": response_ref("Unauthorized"), "405": response_ref("WritesRefused"), "415": response_ref("BadMediaType") } },
        "post": { "summary": "Create the item", "tags": [tag], "requestBody": body,
            "responses": { "201": { "description": "Created" }, "400": response_ref("BadRequest"),
                           "401": response_ref("Unauthorized"), "405": response_ref("WritesRefused"), "409": response_ref("Conflict"),
                           "415": response_ref("BadMediaType") } },
        "delete": { "summary": "Delete the item", "tags": [tag],
            "responses": { "200": { "description": "Deleted" }, "401": response_ref("Unauthorized"), "405": response_ref("WritesRefused"),
                           "404": response_ref("NotFound") } },
    })
}

fn components() -> Value {
    let ip = json!({ "type": "string", "description": "IPv4 or IPv6 address; \"\" means absent" });
    let ips = json!({ "type": "array", "items": ip });
    let port = json!({ "type": "integer", "minimum": 1, "maximum": 65535 });
    let protocol = json!({ "type": "string", "enum": ["TCP", "UDP", "SCTP"], "default": "TCP",
        "description": "svcflow extension; case-insensitive" });
    let error = |description: &str| {
        json!({ "description": description,
        "content": json_content(schema_ref("Errors")) })
    };
    json!({
        "securitySchemes": {
            "basic": { "type": "http", "scheme": "basic" },
            "bearer": { "type": "http", "scheme": "bearer" },
        },
        "parameters": {
            "uid": { "name": "uid", "in": "path", "required": true,
                "schema": { "type": "string", "pattern": "^[A-Za-z0-9._-]{1,253}$" } }
        },
        "responses": {
            "BadRequest": error("A malformed body or an invalid field; error-path names the field. Nothing changed."),
            "Unauthorized": error("Missing or bad credentials"),
            "NotFound": error("No such item"),
            "Conflict": error("POST of an item that exists. Nothing changed."),
            "BadMediaType": error("The body is not JSON"),
            "Unavailable": error("The controller has no operational state yet"),
            "WritesRefused": error("This replica takes no writes: it elects over Kubernetes Leases \
                and keeps no shared REST state (svcflow run --election lease)"),
        },
        "schemas": {
            "Errors": { "type": "object", "properties": { "errors": { "type": "object", "properties": {
                "error": { "type": "array", "items": { "type": "object", "properties": {
                    "error-type": { "type": "string" }, "error-tag": { "type": "string" },
                    "error-path": { "type": "string" }, "error-message": { "type": "string" } } } } } } } },
            "Service": { "type": "object", "required": ["uid"], "properties": {
                "uid": { "type": "string" }, "name": { "type": "string" },
                "network-NS": { "type": "string", "description": "empty means default" },
                "cluster-ip-address": ip,
                "cluster-ip-addresses": { "type": "array", "items": ip, "maxItems": 2,
                    "description": "svcflow extension (spec.clusterIPs): a dual-stack service's cluster IPs, one of each family, the first being cluster-ip-address" },
                "external-ip-address": ips, "load-balancer-IP": ip,
                "ingress-ip-address": ips,
                "service-ports": { "type": "array", "items": schema_ref("ServicePort"),
                    "description": "none: every port is forwarded" },
                "endpoints": { "type": "array", "items": { "type": "string" },
                    "description": "minimal form (design document): uids of the pods behind the service" },
                "external-traffic-policy": { "type": "string", "enum": ["Cluster", "Local"],
                    "description": "svcflow extension: Local keeps traffic from outside on nodes with endpoints, with its source" },
                "load-balancer-source-ranges": { "type": "array", "items": { "type": "string", "example": "203.0.113.0/24" },
                    "description": "svcflow extension (spec.loadBalancerSourceRanges): only these sources reach the ingress addresses; others are dropped" },
                "health-check-node-port": { "type": "integer", "minimum": 1, "maximum": 65535,
                    "description": "svcflow extension (spec.healthCheckNodePort, with external-traffic-policy Local): every node answers HTTP probes on it with its local endpoint count, 200 with some and 503 without" },
            } },
            "ServicePort": { "type": "object", "required": ["port"], "properties": {
                "name": { "type": "string" }, "protocol": protocol, "port": port,
                "target-port": { "type": "string", "description": "number or named port; empty or 0: same as port" },
                "node-port": { "type": "integer", "description": "0 or absent: none; else within the configured range" },
            } },
            "Endpoints": { "type": "object", "required": ["uid", "name"], "properties": {
                "uid": { "type": "string" }, "name": { "type": "string", "description": "the service's name" },
                "network-NS": { "type": "string" },
                "endpoint-addresses": { "type": "array", "items": schema_ref("EndpointAddress") },
                "endpoint-ports": { "type": "array", "items": schema_ref("EndpointPort") },
            } },
            "EndpointAddress": { "type": "object", "required": ["ip-address"], "properties": {
                "ip-address": ip, "host-name": { "type": "string" }, "node-name": { "type": "string" },
                "weight": { "type": "integer", "minimum": 0, "maximum": 65535, "description": "svcflow extension" },
            } },
            "EndpointPort": { "type": "object", "required": ["port"], "properties": {
                "name": { "type": "string" }, "port": port,
                "protocol": { "type": "string", "enum": ["TCP", "UDP", "SCTP"],
                    "description": "svcflow extension; default: the same-named service port's protocol, else TCP" },
            } },
            "Pod": { "type": "object", "required": ["uid"], "properties": {
                "uid": { "type": "string" }, "name": { "type": "string" }, "host-ip-address": ip,
                "network-NS": { "type": "string" }, "port-mac-address": { "type": "string" },
                "interface": { "type": "array", "items": schema_ref("Interface") },
            } },
            "Interface": { "type": "object", "required": ["uid"], "properties": {
                "uid": { "type": "string", "description": "the OVS Interface's external_ids:iface-id" },
                "ip-address": ip, "network-id": { "type": "string" },
                "network-type": { "type": "string", "enum": ["FLAT", "VLAN", "VXLAN", "GRE"] },
                "segmentation-id": { "type": "integer", "minimum": 0, "maximum": 4294967295u64 },
            } },
            "K8sNode": { "type": "object", "required": ["uid"], "properties": {
                "uid": { "type": "string" }, "host-name": { "type": "string" },
                "internal-ip-address": ip, "external-ip-address": ip,
                "pod-cidr": { "type": "string", "example": "10.244.1.0/24,fd00:10:244:1::/64", "description": "one CIDR, or a dual-stack pair (one of each IP family) separated by a comma" },
            } },
            "ServiceState": { "type": "object", "properties": {
                "uid": { "type": "string" }, "network-NS": { "type": "string" }, "name": { "type": "string" },
                "cluster-ips": { "type": "array", "items": { "type": "string" } },
                "external-ips": { "type": "array", "items": { "type": "string" },
                    "description": "externalIPs and load-balancer ingress IPs" },
                "ports": { "type": "array", "items": { "type": "string" },
                    "description": "as kubectl get services prints them", "example": ["80/TCP", "443:30443/TCP"] },
                "groups": { "type": "array", "items": schema_ref("GroupState") },
                "flows": { "type": "array", "items": schema_ref("FlowState") },
                "packet-count": { "type": "integer" }, "byte-count": { "type": "integer" },
            } },
            "GroupState": { "type": "object", "properties": {
                "node": { "type": "string" }, "group-id": { "type": "integer" }, "group-type": { "type": "string" },
                "buckets": { "type": "array", "items": schema_ref("BucketState") },
                "packet-count": { "type": "integer" }, "byte-count": { "type": "integer" },
            } },
            "BucketState": { "type": "object", "properties": {
                "bucket-id": { "type": "integer" }, "endpoint": { "type": "string", "example": "10.1.0.11:8080" },
                "weight": { "type": "integer" }, "packet-count": { "type": "integer" }, "byte-count": { "type": "integer" },
            } },
            "Unreported": { "type": "object", "required": ["node", "reason"], "properties": {
                "node": { "type": "string" },
                "reason": { "type": "string", "example": "mastered by another replica" },
                "master": { "type": "string", "description": "the OpenFlow target of the replica that masters the node" },
                "rest": { "type": "string", "description": "where that replica serves REST", "example": "http://10.0.0.2:8181" },
            } },
            "TraceRequest": { "type": "object", "required": ["node", "from", "to"], "properties": {
                "node": { "type": "string", "description": "the node whose switch the probe enters" },
                "from": { "type": "string", "description": "a pod (namespace/name; a dual-stack pod sends from its address of the destination's family), or an address of the destination's family: a pod's, else a host beyond the node's uplink", "example": "default/client" },
                "to": { "type": "string", "description": "IPv4:PORT or [IPv6]:PORT", "example": "10.96.0.10:80" },
                "protocol": { "type": "string", "enum": ["tcp", "udp"], "default": "tcp" },
            } },
            "TraceReport": { "type": "object", "properties": {
                "request": schema_ref("TraceRequest"),
                "tag": { "type": "integer", "description": "the probe's DSCP value" },
                "probe": { "type": "string", "description": "the probe as ovs-ofctl prints packets" },
                "in_port": { "type": "integer" },
                "hops": { "type": "array", "items": { "type": "object", "properties": {
                    "node": { "type": "string" }, "table": { "type": "integer" },
                    "role": { "type": "string", "enum": ["classifier", "arrived", "service", "onward", "output", "drop", "refuse"] },
                    "flow": { "type": "string", "description": "the flow the probe met, as ovs-ofctl dump-flows prints it" },
                    "packet": { "type": "string", "description": "the packet there (after any NAT)" },
                    "metadata": { "type": "string", "description": "registers and tunnel fields reported with it" },
                    "note": { "type": "string" },
                } } },
                "outcome": { "type": "string", "enum": ["delivered", "dropped", "refused", "forwarded", "lost"] },
                "result": { "type": "string" },
                "nat": { "type": "string", "nullable": true },
                "unwatched": { "type": "array", "items": { "type": "string" } },
            } },
            "NodePlan": { "type": "object", "required": ["node", "bridge", "changes"], "properties": {
                "node": { "type": "string" },
                "bridge": { "type": "string", "example": "br-int" },
                "changes": { "type": "array", "items": { "type": "string" },
                    "description": "in order, as the lines of an `ovs-ofctl bundle` file; empty when the switch holds the model",
                    "example": ["flow add cookie=0x5f00000000000001, table=40, priority=100,tcp,nw_dst=10.96.0.10,tp_dst=80 actions=group:1"] },
                "against": { "type": "string", "description": "present when the switch is not connected: the plan is computed against the state svcflow last synced to it, and says since when" },
            } },
            "NodeState": { "type": "object", "required": ["node", "switch-connected", "writes", "syncs"], "properties": {
                "node": { "type": "string" },
                "switch-connected": { "type": "boolean" },
                "connection": { "type": "integer", "description": "the switch's connection number, while connected" },
                "role": { "type": "string", "enum": ["master", "slave", "equal", "unknown"],
                    "description": "this replica's OpenFlow role, as the switch answers a role request now; absent while not connected" },
                "writes": { "type": "boolean", "description": "whether this replica writes to the switch: its task for the node runs and has synced it at least once" },
                "master": { "type": "string", "description": "the OpenFlow target of the replica that masters the node, when another does" },
                "rest": { "type": "string", "description": "where that replica serves REST" },
                "flows": { "type": "integer", "description": "flows desired, as of this replica's last successful sync" },
                "groups": { "type": "integer", "description": "groups desired, as of that sync" },
                "last-sync": schema_ref("SyncState"),
                "syncs": { "type": "array", "items": schema_ref("SyncState"), "description": "the last 10, newest first" },
                "conflicts": { "type": "array", "items": { "type": "string" },
                    "description": "what the node's desired state cannot honour, as its task last rendered it; absent for a node this replica does not write" },
            } },
            "SyncState": { "type": "object", "required": ["time", "revision", "result"], "properties": {
                "time": { "type": "string", "format": "date-time", "example": "2026-11-24T09:41:00.120Z" },
                "revision": { "type": "integer" },
                "result": { "type": "string", "enum": ["ok", "failed"] },
                "duration-ms": { "type": "number", "description": "successful syncs: from the start of the render to the switch's barrier" },
                "error": { "type": "string" },
                "flows-added": { "type": "integer" }, "flows-modified": { "type": "integer" },
                "flows-deleted": { "type": "integer" }, "groups-changed": { "type": "integer" },
                "conntrack-flushed": { "type": "integer" },
            } },
            "FlowState": { "type": "object", "properties": {
                "node": { "type": "string" }, "table-id": { "type": "integer" }, "priority": { "type": "integer" },
                "cookie": { "type": "integer" }, "flow": { "type": "string", "description": "ovs-ofctl syntax" },
                "packet-count": { "type": "integer" }, "byte-count": { "type": "integer" },
            } },
        }
    })
}
