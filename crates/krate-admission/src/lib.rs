//! The admission chain: built-in plugins (PodSecurity, quotas, limits…), webhooks and
//! admission policies. Arrives with the security and extensibility issues.
