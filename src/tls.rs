//! rustls configurations: floodgate's own certificate towards clients, and certificate
//! verification towards upstream. The crypto provider is chosen explicitly: ring.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        what: String,
    },
    /// rustls refused the material (a key that does not match the certificate, say).
    #[error("TLS configuration refused: {0}")]
    Rustls(#[from] rustls::Error),
    /// No trusted roots were found on this system.
    #[error("no system CA certificates found; set [upstream] ca_file")]
    NoRoots,
}

/// The one crypto provider floodgate uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads a certificate chain and its key into a server configuration.
pub fn server_config(
    certificate: &Path,
    private_key: &Path,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certificate)
        .map_err(|e| pem_err(certificate, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem_err(certificate, e))?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            path: certificate.to_path_buf(),
            what: "no certificate found".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(private_key).map_err(|e| pem_err(private_key, e))?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    Ok(Arc::new(config))
}

/// A client configuration that verifies upstream against `ca_file`, or the system roots.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in CertificateDer::pem_file_iter(path).map_err(|e| pem_err(path, e))? {
                roots.add(cert.map_err(|e| pem_err(path, e))?)?;
            }
            if roots.is_empty() {
                return Err(TlsError::Pem {
                    path: path.to_path_buf(),
                    what: "no CA certificate found".into(),
                });
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // A single unparsable system certificate must not stop the others.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(TlsError::NoRoots);
            }
        }
    }
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

fn pem_err(path: &Path, e: rustls::pki_types::pem::Error) -> TlsError {
    TlsError::Pem {
        path: path.to_path_buf(),
        what: match e {
            rustls::pki_types::pem::Error::Io(io) => io.to_string(),
            other => format!("not valid PEM: {other:?}"),
        },
    }
}
