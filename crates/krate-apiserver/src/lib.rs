//! The Kubernetes API server: HTTP → authentication → audit → authorization →
//! admission → registry → store, and the watch cache that fans store changes out to
//! every watcher. Arrives with the API server core issue.
