//! go-plugin's AutoMTLS, from the client side.
//!
//! The host makes a throwaway self-signed certificate and passes it to the plugin in
//! `PLUGIN_CLIENT_CERT`; the plugin makes its own and prints it (base64 DER) as the sixth field
//! of the handshake line. Neither certificate chains to anything, so trust is by pinning: the
//! server must present exactly the certificate from the handshake. go-plugin's certificates are
//! ECDSA P-521, which stock webpki path validation does not accept, so verification is our own:
//! byte-equal pinning plus a handshake signature check with aws-lc-rs, which does verify P-521.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("failed to generate the client certificate")]
    Generate(#[from] rcgen::Error),
    #[error("the plugin's certificate in the handshake is not valid base64")]
    ServerCertEncoding(#[source] base64::DecodeError),
    #[error("PLUGIN_CLIENT_CERT holds no PEM certificate")]
    ClientCertPem,
    #[error("failed to build the TLS configuration")]
    Config(#[from] rustls::Error),
}

/// The host's side of AutoMTLS: our certificate (PEM for the plugin's environment) and key.
pub struct ClientIdentity {
    pub cert_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl ClientIdentity {
    /// A fresh self-signed certificate, as go-plugin's own client makes one: a CA certificate
    /// for `localhost` usable for both client and server auth (the plugin adds it to its
    /// client-CA pool, so it must be able to act as its own issuer).
    pub fn generate() -> Result<Self, TlsError> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Kraken plugin host");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "localhost");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyEncipherment,
            rcgen::KeyUsagePurpose::KeyCertSign,
        ];
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        ];
        // Long-lived because a provider process may reconnect long after launch; the
        // certificate never leaves this process and the plugin's own memory.
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        })
    }

    /// A rustls client configuration that presents our certificate and accepts only `pinned`.
    pub fn client_config(
        &self,
        pinned_server_cert: Vec<u8>,
    ) -> Result<rustls::ClientConfig, TlsError> {
        let provider = Arc::new(crypto_provider());
        let verifier = Arc::new(PinnedCert {
            cert: pinned_server_cert,
            algorithms: provider.signature_verification_algorithms,
        });
        let key = PrivateKeyDer::Pkcs8(self.key_der.clone().into());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_auth_cert(vec![self.cert_der.clone()], key)?;
        // grpc-go refuses TLS connections that do not negotiate HTTP/2 through ALPN.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

impl ClientIdentity {
    /// An identity kept elsewhere (a Secret), from its certificate and PKCS#8 key, both DER:
    /// the `pods` placement's operator identity, which every replica shares, and a runner's.
    pub fn from_der(cert_der: Vec<u8>, key_der: Vec<u8>) -> Result<Self, TlsError> {
        use base64::Engine as _;
        let body = base64::engine::general_purpose::STANDARD.encode(&cert_der);
        let mut cert_pem = String::from("-----BEGIN CERTIFICATE-----\n");
        for chunk in body.as_bytes().chunks(64) {
            cert_pem.push_str(&String::from_utf8_lossy(chunk));
            cert_pem.push('\n');
        }
        cert_pem.push_str("-----END CERTIFICATE-----\n");
        // Refuse a key that does not parse now, not at the first connection.
        rcgen::KeyPair::try_from(key_der.as_slice())?;
        Ok(Self {
            cert_pem,
            cert_der: CertificateDer::from(cert_der),
            key_der,
        })
    }

    /// The certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        self.cert_der.as_ref()
    }

    /// The private key, PKCS#8 DER: for the Secret that keeps it, nowhere else.
    pub fn key_der(&self) -> &[u8] {
        &self.key_der
    }
}

impl ClientIdentity {
    /// This certificate as a handshake's sixth field (base64 DER, unpadded, as go-plugin).
    pub fn cert_field(&self) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(self.cert_der.as_ref())
    }

    /// The server side of AutoMTLS, as a runner serves it: present this certificate and
    /// accept only a client presenting exactly `pinned_client_cert` (DER).
    pub fn server_config(
        &self,
        pinned_client_cert: Vec<u8>,
    ) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(crypto_provider());
        let verifier = Arc::new(PinnedCert {
            cert: pinned_client_cert,
            algorithms: provider.signature_verification_algorithms,
        });
        let key = PrivateKeyDer::Pkcs8(self.key_der.clone().into());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.cert_der.clone()], key)?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// The DER of the first certificate in `pem` (what a launcher put in `PLUGIN_CLIENT_CERT`).
pub fn decode_client_cert_pem(pem: &str) -> Result<Vec<u8>, TlsError> {
    use base64::Engine as _;
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END CERTIFICATE-----"))
        .collect();
    if body.is_empty() {
        return Err(TlsError::ClientCertPem);
    }
    base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .map_err(TlsError::ServerCertEncoding)
}

/// Decode the handshake's certificate field. go-plugin writes it unpadded; accept padding too.
pub fn decode_server_cert(field: &str) -> Result<Vec<u8>, TlsError> {
    use base64::Engine as _;
    let trimmed = field.trim().trim_end_matches('=');
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(trimmed)
        .map_err(TlsError::ServerCertEncoding)
}

/// Accepts exactly one certificate (byte-equal), whatever its issuer, name or validity: as the
/// launcher's check of a plugin's server certificate, and as a runner's check of its
/// launcher's client certificate.
#[derive(Debug)]
struct PinnedCert {
    cert: Vec<u8>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl PinnedCert {
    fn matches(&self, end_entity: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if end_entity.as_ref() == self.cert.as_slice() {
            Ok(())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn tls12(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }
}

impl rustls::server::danger::ClientCertVerifier for PinnedCert {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        self.matches(end_entity)
            .map(|()| rustls::server::danger::ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.matches(end_entity)
            .map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The crypto provider for plugin connections. Passed explicitly (nothing is installed
/// process-wide) and checked by a test to verify P-521, which go-plugin's certificates use.
pub fn crypto_provider() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_verifies_p521() {
        let schemes = crypto_provider()
            .signature_verification_algorithms
            .supported_schemes();
        assert!(schemes.contains(&SignatureScheme::ECDSA_NISTP521_SHA512));
    }

    #[test]
    fn generated_identity_is_pem_and_builds_a_config() {
        let id = ClientIdentity::generate().expect("generate");
        assert!(id.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let cfg = id.client_config(vec![1, 2, 3]).expect("config");
        assert_eq!(cfg.alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn client_pem_round_trips_and_builds_a_server_config() {
        let id = ClientIdentity::generate().expect("generate");
        let der = decode_client_cert_pem(&id.cert_pem).expect("pem");
        assert_eq!(der, id.cert_der.as_ref());
        assert_eq!(decode_server_cert(&id.cert_field()).expect("field"), der);
        let cfg = id.server_config(der).expect("server config");
        assert_eq!(cfg.alpn_protocols, vec![b"h2".to_vec()]);
        assert!(decode_client_cert_pem("not a certificate").is_err());
    }

    #[test]
    fn server_cert_field_decodes_with_or_without_padding() {
        assert_eq!(decode_server_cert("AQID").expect("plain"), vec![1, 2, 3]);
        assert_eq!(decode_server_cert("AQI=").expect("padded"), vec![1, 2]);
        assert!(decode_server_cert("@@@").is_err());
    }

    #[test]
    fn pinning_rejects_other_certificates() {
        let v = PinnedCert {
            cert: vec![1, 2, 3],
            algorithms: crypto_provider().signature_verification_algorithms,
        };
        let name = ServerName::try_from("localhost").expect("name");
        let ok = v.verify_server_cert(
            &CertificateDer::from(vec![1, 2, 3]),
            &[],
            &name,
            &[],
            UnixTime::now(),
        );
        assert!(ok.is_ok());
        let bad = v.verify_server_cert(
            &CertificateDer::from(vec![1, 2, 4]),
            &[],
            &name,
            &[],
            UnixTime::now(),
        );
        assert!(bad.is_err());
    }
}
