/// A value could not be encrypted or decrypted. Always a server-side fault: the message
/// names the provider so an operator knows where to look.
#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    /// The stored value carries no prefix any configured provider recognises.
    #[error("{0}")]
    NoMatchingPrefix(String),
    /// identity read a value that was written encrypted.
    #[error("identity transformer tried to read encrypted data")]
    EncryptedDataForIdentity,
    /// A cipher rejected the value: wrong key, corrupt or moved data.
    #[error("{provider}: {reason}")]
    Cipher { provider: String, reason: String },
    /// The KMS plugin failed or is not ready.
    #[error("KMS provider {provider}: {reason}")]
    Kms { provider: String, reason: String },
}

impl TransformError {
    pub(crate) fn cipher(provider: &str, reason: impl std::fmt::Display) -> Self {
        TransformError::Cipher { provider: provider.to_string(), reason: reason.to_string() }
    }
    pub(crate) fn kms(provider: &str, reason: impl std::fmt::Display) -> Self {
        TransformError::Kms { provider: provider.to_string(), reason: reason.to_string() }
    }
}

/// The encryption configuration file is unreadable or invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("error opening encryption provider configuration file {path:?}: {reason}")]
    Read { path: String, reason: String },
    #[error("encryption provider configuration file {0:?} is empty")]
    Empty(String),
    #[error("error while parsing file: {0}")]
    Parse(String),
    /// Field errors, formatted as upstream's aggregate.
    #[error("{}", format_invalid(.0))]
    Invalid(Vec<String>),
    #[error("{0}")]
    Provider(String),
}

fn format_invalid(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}
