//! Where every outbound HTTP client is built (the payment providers, signed webhooks, the
//! identity provider's key set, the trace exporter) and the TLS every one of them, and SMTP's,
//! runs on: reqwest and lettre are built without a default rustls provider (no aws-lc C
//! build), so ring is installed process-wide before the first client.

/// Installs the process-wide TLS crypto provider (ring). Idempotent.
pub fn install_tls_provider() {
    // Fails only if a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// reqwest's client builder, with the TLS provider installed.
pub fn builder() -> reqwest::ClientBuilder {
    install_tls_provider();
    reqwest::Client::builder()
}
