//! The TLS side of client certificates: the handshake asks for one (naming the cluster
//! CA as the acceptable issuer) and checks only that the client holds its key. Whether
//! the certificate is trusted — issuer, validity period — is the x509 authenticator's
//! call, so that a wrong or expired certificate gets upstream's 401 Status instead of a
//! failed handshake the client cannot explain.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

#[derive(Debug)]
pub struct AnyClientCert {
    provider: Arc<CryptoProvider>,
    /// The CA's subject, sent as the acceptable issuer (Go clients pick their
    /// certificate by it, as with upstream).
    hints: Vec<DistinguishedName>,
}

impl AnyClientCert {
    pub fn new(provider: Arc<CryptoProvider>, roots: &RootCertStore) -> Self {
        AnyClientCert { provider, hints: roots.subjects() }
    }
}

impl ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}
