//! API types and the resource registry: the table of resources (group, version, kind,
//! plural, scope, verbs, short names), per-kind strategies, and the generic registry
//! that stores objects through `krate-store`. Arrives with the API server core issue.
