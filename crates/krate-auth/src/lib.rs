//! Authentication (who is asking) and authorization (may they), the two stages of the
//! request road between the transport and admission.
//!
//! - [`authn`]: an [`authn::Authenticator`] turns a request's credentials (client
//!   certificate, bearer token) into a user; several are tried in turn.
//! - [`authz`]: an [`authz::Authorizer`] decides whether that user may do what the
//!   request asks; several are asked in turn, the first decision wins.

pub mod authn;
pub mod authz;
