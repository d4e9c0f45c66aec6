//! What krate's components (controller manager, scheduler, node agents) share as clients
//! of the API server, as upstream's share client-go's tools: informers that watch a kind
//! once and fan its changes out to every consumer, and leader election on Leases.

pub mod informers;
pub mod leader;
pub mod v1helpers;

pub use informers::{Informer, Informers};
