//! TLS for the API: rustls with the ring provider, certificate and key from
//! PEM files, and, with `client_ca`, client certificates required (mutual TLS).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::api::TlsConfig;
use crate::config::{Diagnostic, PipelineConfig};

/// The server's TLS configuration (HTTP/2 and HTTP/1.1 offered by ALPN).
pub fn server_config(cfg: &PipelineConfig, t: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, Diagnostic> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert_path = cfg.resolve_path(&t.cert)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| cfg.diag(t.cert.span(), format!("cannot read certificate {}: {e}", cert_path.display())))?;
    if certs.is_empty() {
        return Err(cfg
            .diag(t.cert.span(), format!("no certificate in {}", cert_path.display()))
            .with_help("give a PEM file with `-----BEGIN CERTIFICATE-----`"));
    }
    let key_path = cfg.resolve_path(&t.key)?;
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| cfg.diag(t.key.span(), format!("cannot read private key {}: {e}", key_path.display())))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| cfg.diag(t.cert.span(), e.to_string()))?;
    let builder = match &t.client_ca {
        Some(ca) => {
            let ca_path = cfg.resolve_path(ca)?;
            let mut roots = rustls::RootCertStore::empty();
            let cas = CertificateDer::pem_file_iter(&ca_path)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| cfg.diag(ca.span(), format!("cannot read CA {}: {e}", ca_path.display())))?;
            for c in cas {
                roots.add(c).map_err(|e| cfg.diag(ca.span(), format!("CA {}: {e}", ca_path.display())))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| cfg.diag(ca.span(), format!("CA {}: {e}", ca_path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut server = builder
        .with_single_cert(certs, key)
        .map_err(|e| cfg.diag(t.key.span(), format!("certificate and key do not make a TLS identity: {e}")))?;
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(server))
}
