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

/// The log filter for `[log] level`, with rustls's own messages kept to errors unless the
/// level names rustls itself (`"info,rustls=debug"`). rustls logs what it sees of a peer
/// (an IP address sent as SNI, warning alerts, unexpected handshake messages) without
/// saying which peer, mostly about handshakes that go on to succeed; floodgate logs every
/// failed client handshake itself, with the client's address, listener and rustls's error.
pub fn log_directives(level: &str) -> String {
    let names_rustls = level
        .split(',')
        .any(|d| d.trim().split(['=', '[', ':']).next() == Some("rustls"));
    if names_rustls || level.trim().is_empty() {
        level.to_string()
    } else {
        format!("{level},rustls=error")
    }
}

#[cfg(test)]
mod log_tests {
    use super::log_directives;

    #[test]
    fn rustls_is_quieted_unless_named() {
        assert_eq!(log_directives("info"), "info,rustls=error");
        assert_eq!(log_directives("debug"), "debug,rustls=error");
        assert_eq!(
            log_directives("warn,floodgate=debug"),
            "warn,floodgate=debug,rustls=error"
        );
        assert_eq!(log_directives("info,rustls=debug"), "info,rustls=debug");
        assert_eq!(log_directives("info, rustls=warn"), "info, rustls=warn");
        assert_eq!(
            log_directives("info,rustls::msgs=warn"),
            "info,rustls::msgs=warn"
        );
        // A target that only starts with "rustls" is another crate.
        assert_eq!(
            log_directives("info,rustls_pemfile=debug"),
            "info,rustls_pemfile=debug,rustls=error"
        );
    }

    #[test]
    fn the_directives_are_a_valid_filter() {
        for level in ["info", "debug", "warn,floodgate=trace", "info,rustls=debug"] {
            let d = log_directives(level);
            tracing_subscriber::EnvFilter::try_new(&d).unwrap_or_else(|e| panic!("{d}: {e}"));
        }
    }
}
